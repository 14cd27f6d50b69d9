// Self tests of the e2e support code (process, client, harness) against the test upstream
// alone: no gateway involved.
#include "../support/harness.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <csignal>
#include <filesystem>
#include <stdexcept>

namespace json = boost::json;
using namespace sluice::test;

namespace {

json::object parse_json(const std::string& body) { return json::parse(body).as_object(); }

std::uint64_t bytes_sum(std::string_view s) {
    std::uint64_t sum = 0;
    for (unsigned char c : s) sum += c;
    return sum;
}

constexpr std::uint64_t big = 50ull * 1000 * 1000;

}  // namespace

TEST_CASE("pattern_sum matches a direct sum") {
    for (std::uint64_t n : {0ull, 1ull, 25ull, 26ull, 27ull, 1000ull}) {
        std::string s;
        for (std::uint64_t i = 0; i < n; ++i) s += static_cast<char>('a' + i % 26);
        CHECK(pattern_sum(n) == bytes_sum(s));
    }
}

TEST_CASE("upstream echo via fetch") {
    auto up = start_upstream();
    REQUIRE(up->port != 0);
    auto r = fetch(up->port, "POST", "/echo?x=1&y", {{"X-Mixed-Case", "Value 1"}, {"x-lower", "v2"}}, "hello");
    CHECK(r.status == 200);
    CHECK(r.version == 11);
    CHECK(r.header("content-type") == "application/json");
    CHECK(r.has_header("Content-Length"));
    CHECK(r.count_header("X-Absent") == 0);
    auto o = parse_json(r.body);
    CHECK(o.at("method").as_string() == "POST");
    CHECK(o.at("target").as_string() == "/echo?x=1&y");
    CHECK(o.at("version").as_int64() == 11);
    CHECK(o.at("body_bytes").to_number<std::uint64_t>() == 5);
    CHECK(o.at("body_sum").to_number<std::uint64_t>() == bytes_sum("hello"));
    CHECK(o.at("body").as_string() == "hello");
    CHECK(o.at("connection_id").is_number());
    const auto& headers = o.at("headers").as_array();
    REQUIRE(headers.size() == 4);  // Host, X-Mixed-Case, x-lower, Content-Length
    CHECK(headers[0].as_array()[0].as_string() == "Host");
    CHECK(headers[0].as_array()[1].as_string() == "test");
    CHECK(headers[1].as_array()[0].as_string() == "X-Mixed-Case");
    CHECK(headers[1].as_array()[1].as_string() == "Value 1");
    CHECK(headers[2].as_array()[0].as_string() == "x-lower");
    CHECK(headers[3].as_array()[0].as_string() == "Content-Length");

    // any other path echoes too, and a fresh connection gets a new id
    auto r2 = fetch(up->port, "GET", "/anything/else");
    auto o2 = parse_json(r2.body);
    CHECK(o2.at("target").as_string() == "/anything/else");
    CHECK(o2.at("body_bytes").to_number<std::uint64_t>() == 0);
    CHECK(o2.at("connection_id").to_number<std::uint64_t>() != o.at("connection_id").to_number<std::uint64_t>());
}

TEST_CASE("pipelined requests on one connection, HEAD, and HTTP/1.0") {
    auto up = start_upstream();
    connection c("127.0.0.1", up->port);
    c.send(make_request("GET", "/echo?n=1") + make_request("GET", "/echo?n=2"));
    auto r1 = c.read_response();
    auto r2 = c.read_response();
    CHECK(r1.status == 200);
    CHECK(r2.status == 200);
    auto o1 = parse_json(r1.body);
    auto o2 = parse_json(r2.body);
    CHECK(o1.at("target").as_string() == "/echo?n=1");
    CHECK(o2.at("target").as_string() == "/echo?n=2");
    CHECK(o1.at("connection_id") == o2.at("connection_id"));

    c.send(make_request("HEAD", "/bytes?n=12345"));
    auto h = c.read_response(true);
    CHECK(h.status == 200);
    CHECK(h.header("Content-Length") == "12345");
    CHECK(h.body.empty());
    c.send(make_request("GET", "/bytes?n=30"));
    auto b = c.read_response();
    CHECK(b.body == "abcdefghijklmnopqrstuvwxyzabcd");

    connection c10("127.0.0.1", up->port);
    c10.send("GET /echo HTTP/1.0\r\nHost: test\r\n\r\n");
    auto r10 = c10.read_response();
    CHECK(r10.status == 200);
    CHECK(parse_json(r10.body).at("version").as_int64() == 10);
    CHECK(c10.wait_closed(5s));

    connection k10("127.0.0.1", up->port);
    k10.send("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    auto a = k10.read_response();
    CHECK(a.header("Connection") == "keep-alive");
    k10.send("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    auto b10 = k10.read_response();
    CHECK(parse_json(a.body).at("connection_id") == parse_json(b10.body).at("connection_id"));
}

TEST_CASE("large downloads stream with Content-Length and chunked") {
    auto up = start_upstream();
    auto r = stream_request(up->port, "GET", "/bytes?n=" + std::to_string(big), 0);
    CHECK(r.status == 200);
    CHECK(r.body_bytes == big);
    CHECK(r.body_sum == pattern_sum(big));
    CHECK(r.body_prefix.size() == 65536);
    CHECK(r.body_prefix.substr(0, 28) == "abcdefghijklmnopqrstuvwxyzab");

    auto c = stream_request(up->port, "GET", "/bytes?n=" + std::to_string(big) + "&chunked=1&piece=100000", 0);
    CHECK(c.status == 200);
    bool chunked = false;
    for (const auto& [n, v] : c.headers)
        if (n == "Transfer-Encoding" && v == "chunked") chunked = true;
    CHECK(chunked);
    CHECK(c.body_bytes == big);
    CHECK(c.body_sum == pattern_sum(big));

    auto nl = stream_request(up->port, "GET", "/no-length?n=1000001", 0);
    CHECK(nl.status == 200);
    CHECK(nl.body_bytes == 1000001);
    CHECK(nl.body_sum == pattern_sum(1000001));

    auto head = stream_request(up->port, "HEAD", "/bytes?n=" + std::to_string(big), 0);
    CHECK(head.status == 200);
    CHECK(head.body_bytes == 0);
}

TEST_CASE("large uploads are counted by echo") {
    auto up = start_upstream();
    auto r = stream_request(up->port, "POST", "/echo", big);
    REQUIRE(r.status == 200);
    auto o = parse_json(r.body_prefix);
    CHECK(o.at("body_bytes").to_number<std::uint64_t>() == big);
    CHECK(o.at("body_sum").to_number<std::uint64_t>() == pattern_sum(big));
    CHECK_FALSE(o.contains("body"));

    auto c = stream_request(up->port, "PUT", "/echo", big + 7, true);
    REQUIRE(c.status == 200);
    auto oc = parse_json(c.body_prefix);
    CHECK(oc.at("body_bytes").to_number<std::uint64_t>() == big + 7);
    CHECK(oc.at("body_sum").to_number<std::uint64_t>() == pattern_sum(big + 7));

    // Expect: 100-continue gets an interim response, which stream_request skips
    auto e = stream_request(up->port, "POST", "/echo", 1000, false, {{"Expect", "100-continue"}});
    CHECK(e.status == 200);
    CHECK(parse_json(e.body_prefix).at("body_bytes").to_number<std::uint64_t>() == 1000);
}

TEST_CASE("connection endings: close-early, reset, close-after, no-length") {
    auto up = start_upstream();
    {
        connection c("127.0.0.1", up->port);
        c.send(make_request("GET", "/close-early"));
        CHECK(c.wait_closed(5s));
    }
    {
        connection c("127.0.0.1", up->port);
        c.send(make_request("GET", "/reset"));
        CHECK(c.wait_closed(5s));
    }
    {
        connection c("127.0.0.1", up->port);
        c.send(make_request("GET", "/close-early"));
        CHECK_THROWS_AS(c.read_response(), std::runtime_error);
    }
    {
        connection c("127.0.0.1", up->port);
        c.send(make_request("GET", "/close-after"));
        auto r = c.read_response();
        CHECK(r.status == 200);
        CHECK(r.body == "bye");
        CHECK_FALSE(r.has_header("Connection"));
        CHECK(c.wait_closed(5s));
    }
    {
        connection c("127.0.0.1", up->port);
        c.send(make_request("GET", "/no-length?n=100"));
        auto r = c.read_response();
        CHECK(r.status == 200);
        CHECK(r.version == 11);
        CHECK_FALSE(r.has_header("Content-Length"));
        CHECK(r.header("Connection") == "close");
        CHECK(r.body.size() == 100);
    }
    {
        // an idle connection stays open
        connection c("127.0.0.1", up->port);
        CHECK_FALSE(c.wait_closed(100ms));
    }
}

TEST_CASE("status codes, early hints, hop-by-hop response headers, stats") {
    auto up = start_upstream();
    auto s404 = fetch(up->port, "GET", "/status?code=404");
    CHECK(s404.status == 404);
    CHECK(s404.body == "status 404");
    auto s204 = fetch(up->port, "GET", "/status?code=204");
    CHECK(s204.status == 204);
    CHECK(s204.body.empty());
    CHECK_FALSE(s204.has_header("Content-Length"));
    auto head = fetch(up->port, "HEAD", "/status?code=503");
    CHECK(head.status == 503);
    CHECK(head.header("Content-Length") == "10");
    CHECK(head.body.empty());

    connection c("127.0.0.1", up->port);
    c.send(make_request("GET", "/early-hints"));
    auto hints = c.read_response();
    CHECK(hints.status == 103);
    CHECK(hints.header("Link") == "</style.css>; rel=preload");
    auto final_response = c.read_response();
    CHECK(final_response.status == 200);
    CHECK(final_response.body == "hinted");

    auto rh = fetch(up->port, "GET", "/response-headers");
    CHECK(rh.body == "ok");
    CHECK(rh.header("Connection") == "X-Secret, keep-alive");
    CHECK(rh.header("X-Secret") == "1");
    CHECK(rh.header("Keep-Alive") == "timeout=5");
    CHECK(rh.header("Proxy-Authenticate") == "Basic");
    CHECK(rh.header("X-Kept") == "yes");

    auto stats = parse_json(fetch(up->port, "GET", "/stats").body);
    // six connections (five fetches and c), one request each; /stats requests are not counted
    CHECK(stats.at("connections_accepted").to_number<std::uint64_t>() == 6);
    CHECK(stats.at("requests").to_number<std::uint64_t>() == 5);
}

TEST_CASE("test upstream: --name, /healthz, /control, per-method counts") {
    auto up = start_upstream({"--name", "a"});
    auto echo = fetch(up->port, "GET", "/echo");
    CHECK(echo.header("X-Upstream-Name") == "a");
    CHECK(parse_json(echo.body).at("upstream_name") == "a");
    CHECK(fetch(up->port, "GET", "/healthz").body == "ok");
    CHECK(fetch(up->port, "GET", "/control?health=503").status == 200);
    CHECK(fetch(up->port, "GET", "/healthz").status == 503);
    CHECK(fetch(up->port, "GET", "/control?health=0&status=500&delay_ms=1").status == 200);
    CHECK(fetch(up->port, "GET", "/healthz").status == 200);
    auto failing = fetch(up->port, "POST", "/echo", {}, "x");
    CHECK(failing.status == 500);
    CHECK(failing.body == "status 500");
    CHECK(failing.header("X-Upstream-Name") == "a");
    CHECK(fetch(up->port, "GET", "/control?status=0&delay_ms=0&reset=1").status == 200);
    connection c("127.0.0.1", up->port);
    c.send(make_request("POST", "/echo", {}, "body"));
    CHECK(c.wait_closed(5s));
    CHECK(fetch(up->port, "GET", "/control?reset=0&nonsense=1").status == 400);  // changes nothing
    CHECK(fetch(up->port, "GET", "/control?reset=0").status == 200);
    CHECK(fetch(up->port, "GET", "/echo").status == 200);
    auto stats = parse_json(fetch(up->port, "GET", "/stats").body);
    // /control, /stats and /healthz are not requests; /healthz has a count of its own
    CHECK(stats.at("requests").to_number<std::uint64_t>() == 4);
    CHECK(stats.at("gets").to_number<std::uint64_t>() == 2);
    CHECK(stats.at("posts").to_number<std::uint64_t>() == 2);
    CHECK(stats.at("healthz").to_number<std::uint64_t>() == 3);
}

TEST_CASE("upgrade echoes raw bytes, slow responses hit client timeouts") {
    auto up = start_upstream();
    {
        connection c("127.0.0.1", up->port);
        c.send(make_request("GET", "/upgrade", {{"Connection", "Upgrade"}, {"Upgrade", "testproto"}}) + "early");
        auto r = c.read_response();
        CHECK(r.status == 101);
        CHECK(r.header("Upgrade") == "testproto");
        std::string got;
        for (int i = 0; i < 50 && got.size() < 5; ++i) got += c.read_available(2s);
        CHECK(got == "early");
        c.send("ping");
        got.clear();
        for (int i = 0; i < 50 && got.size() < 4; ++i) got += c.read_available(2s);
        CHECK(got == "ping");
        c.shutdown_write();
        CHECK(c.wait_closed(5s));
    }
    CHECK(fetch(up->port, "GET", "/upgrade").status == 426);

    auto slow = fetch(up->port, "GET", "/slow?ms=50");
    CHECK(slow.body == "slow");
    connection c("127.0.0.1", up->port, 100ms);
    c.send(make_request("GET", "/slow?ms=2000"));
    CHECK_THROWS_AS(c.read_response(), std::runtime_error);
    CHECK(c.read_available(10ms).empty());
}

TEST_CASE("process: wait_for_line, exit status, signals") {
    auto up = start_upstream();
    // all output since start is searched, including lines matched before
    auto again = up->proc.wait_for_line(R"(listening on 127\.0\.0\.1:(\d+))", 1s);
    CHECK(again.at(1) == std::to_string(up->port));
    CHECK_THROWS_AS(up->proc.wait_for_line("no such line", 200ms), std::runtime_error);
    try {
        up->proc.wait_for_line("no such line", 50ms);
        FAIL("expected a timeout");
    } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()).find("listening on 127.0.0.1:") != std::string::npos);
    }
    CHECK(up->proc.running());
    up->proc.signal(SIGTERM);
    auto st = up->proc.wait_exit(5s);
    REQUIRE(st.has_value());
    CHECK(*st == 0);
    CHECK_FALSE(up->proc.running());
    up->proc.signal(SIGTERM);  // no-op once reaped

    process sh({"/bin/sh", "-c", "echo one; echo \"two $SLUICE_SELFTEST\" >&2; exit 3"},
               {{"SLUICE_SELFTEST", "env-ok"}});
    CHECK(sh.wait_for_line("^two (.*)$").at(1) == "env-ok");
    CHECK_THROWS_AS(sh.wait_for_line("three"), std::runtime_error);  // output ends: throws at once
    CHECK(sh.wait_exit(5s) == 3);
    CHECK(sh.output() == "one\ntwo env-ok\n");

    process sleeper({"sleep", "30"});
    CHECK_FALSE(sleeper.wait_exit(50ms).has_value());
    sleeper.signal(SIGKILL);
    CHECK(sleeper.wait_exit(5s) == 128 + SIGKILL);

    CHECK_THROWS_AS(process({"/nonexistent/program"}), std::runtime_error);
}

TEST_CASE("gateway_yaml builds nested YAML with overrides") {
    auto y = gateway_yaml(1234,
                          {{"server.max_body_bytes", "1KiB"},
                           {"upstream.timeout", "200ms"},
                           {"server.threads", "1"},
                           {"limits.default.rate", "10"}},
                          "extra_section:\n  key: v\n");
    CHECK(y ==
          "server:\n"
          "  listen: \"127.0.0.1:0\"\n"
          "  threads: 1\n"
          "  max_body_bytes: 1KiB\n"
          "admin:\n"
          "  listen: \"127.0.0.1:0\"\n"
          "upstream:\n"
          "  url: \"http://127.0.0.1:1234\"\n"
          "  timeout: 200ms\n"
          "log:\n"
          "  level: info\n"
          "limits:\n"
          "  default:\n"
          "    rate: 10\n"
          "extra_section:\n"
          "  key: v\n");
    // no gateway binary in the self tests: launching it must fail cleanly
    if (!std::filesystem::exists(sluice_bin())) CHECK_THROWS_AS(start_gateway(y), std::runtime_error);
}
