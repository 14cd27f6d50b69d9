// What the gateway reads and forwards, through the real gateway binary and the test upstream:
// response framing, path normalisation against limits, chunk bounds, forwarded headers.
#include "../support/probe.hpp"
#include "e2e.hpp"

#include <optional>

using namespace sluice::test;

namespace {

std::int64_t upstream_stat(const upstream_server& up, const char* name) {
    return json_of(fetch(up.port, "GET", "/stats")).at(name).to_number<std::int64_t>();
}

// A raw request on its own connection; its answer, or status -1 if none came.
response raw_exchange(std::uint16_t port, const std::string& raw) {
    try {
        connection c("127.0.0.1", port, 5s);
        c.send(raw);
        return c.read_response();
    } catch (const std::exception& e) {
        response none;
        none.status = -1;
        none.body = e.what();
        return none;
    }
}

std::string target_seen_by_upstream(const response& r) {
    if (r.status != 200) return "(status " + std::to_string(r.status) + ")";
    return std::string(json_of(r).at("target").as_string());
}

}  // namespace

// A connection went back to the pool even when the upstream sent more than its
// response (a second response, a body after HEAD / 204 / 304, a body longer than its
// Content-Length); the next client on that connection was sent those bytes as its answer.
// /desync sends "ok", then (delay_ms later, while the connection sits in the pool) a whole
// response carrying SECRET-FOR-SOMEONE-ELSE!.
TEST_CASE("bytes an upstream sends after its response never reach another client") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {{"server.threads", "1"}}));
    INFO("gateway output:\n", gw->proc->output());
    struct variant {
        const char* method;
        const char* target;
        int status;
    };
    const variant variants[] = {
        {"GET", "/desync?delay_ms=100", 200},             // an extra response after a complete one
        {"HEAD", "/desync?delay_ms=100", 200},            // a body after HEAD
        {"GET", "/desync?status=204&delay_ms=100", 204},  // a body after 204
        {"GET", "/desync?status=304&delay_ms=100", 304},  // a body after 304
        {"GET", "/desync", 200},                          // a body longer than its Content-Length
    };
    std::int64_t sent = upstream_stat(*up, "desync_sent");
    int asked = 0;
    for (const auto& v : variants) {
        CAPTURE(v.method);
        CAPTURE(v.target);
        {
            connection one("127.0.0.1", gw->port);
            one.send(make_request(v.method, v.target));
            auto r = one.read_response(std::string_view(v.method) == "HEAD");
            CHECK(r.status == v.status);
            if (v.status == 200 && std::string_view(v.method) == "GET") CHECK(r.body == "ok");
        }
        // The extra bytes are on their way to the gateway (written by the upstream).
        REQUIRE(eventually([&] { return upstream_stat(*up, "desync_sent") == sent + 1; }));
        ++sent;
        connection two("127.0.0.1", gw->port);
        for (int i = 0; i < 3; ++i) {
            const std::string target = "/echo?n=" + std::to_string(++asked);
            two.send(make_request("GET", target));
            auto r = two.read_response();
            CHECK(r.body.find("SECRET") == std::string::npos);
            CHECK(r.status == 200);
            CHECK(target_seen_by_upstream(r) == target);
        }
    }
}

// Routes matched the raw path: spellings the upstream reads as /login walked around
// its limit. The path is normalised before routing, and the normalised path is forwarded.
TEST_CASE("a path spelled differently cannot walk around its route's limit") {
    auto up = start_upstream();
    const std::string policies = R"(
policies:
  login:
    ip: [ {limit: 3, per: 1m} ]
)";
    enum class check { spellings, absolute_form, case_insensitive } mode = check::spellings;
    std::string routes;
    SUBCASE("spellings of /login, refused targets, the path forwarded") {
        routes = R"(
routes:
  - { match: { path: /login }, policy: login }
  - { match: { path_prefix: / }, policy: none }
)";
    }
    SUBCASE("absolute-form target: routed by its authority, forwarded in origin form") {
        mode = check::absolute_form;
        routes = R"(
routes:
  - { match: { host: other.example, path: /login }, policy: login }
  - { match: { path_prefix: / }, policy: none }
)";
    }
    SUBCASE("match.case_insensitive") {
        mode = check::case_insensitive;
        routes = R"(
routes:
  - { match: { path: /login, case_insensitive: true }, policy: login }
  - { match: { path_prefix: / }, policy: none }
)";
    }
    auto gw = start_gateway(gateway_yaml(up->port, {}, policies + routes));
    const auto requests_before = upstream_stat(*up, "requests");
    auto get = [&](const std::string& target, const std::string& host = "test") {
        return raw_exchange(gw->port, "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    };

    if (mode == check::absolute_form) {
        // The Host field names the route's host, the target another: the target wins.
        for (int i = 0; i < 5; ++i) CHECK(get("http://test/login", "other.example").status == 200);
        int ok = 0, limited = 0;
        for (int i = 0; i < 5; ++i) {
            auto r = get("http://other.example/login");
            if (r.status == 200) {
                ++ok;
                auto echo = json_of(r);
                CHECK(echo.at("target").as_string() == "/login");
                CHECK(echoed(echo, "Host") == "other.example");
            } else {
                CHECK(r.status == 429);
                ++limited;
            }
        }
        CHECK(ok == 3);
        CHECK(limited == 2);
        return;
    }

    if (mode == check::case_insensitive) {
        int ok = 0, limited = 0, other = 0;
        for (const char* spelling : {"/LOGIN", "/Login", "/lOgIn/", "/login"})
            for (int i = 0; i < 5; ++i) {
                auto r = get(spelling);
                (r.status == 200 ? ok : r.status == 429 ? limited : other)++;
            }
        CHECK(ok == 3);
        CHECK(limited == 17);
        CHECK(other == 0);
        return;
    }

    // One client (one ip) tries every spelling: three requests in all may pass.
    int ok = 0, limited = 0, other = 0;
    for (const char* spelling : {"//login", "/./login", "/a/../login", "/%6Cogin", "/log%69n", "/login/", "/login;a"}) {
        CAPTURE(spelling);
        for (int i = 0; i < 10; ++i) {
            auto r = get(spelling);
            (r.status == 200 ? ok : r.status == 429 ? limited : other)++;
            if (r.status == 200) {  // the upstream was sent the normal form (;params stay)
                const auto target = target_seen_by_upstream(r);
                CHECK((target == "/login" || target == "/login/" || target == "/login;a"));
            }
        }
    }
    CHECK(ok <= 3);
    CHECK(limited == 70 - ok);
    CHECK(other == 0);
    CHECK(upstream_stat(*up, "requests") == requests_before + ok);

    // What the upstream is sent is the normalised path (the catch-all route has no limit).
    const std::pair<const char*, const char*> forwarded[] = {
        {"/a/../echo", "/echo"},
        {"//echo//x", "/echo/x"},
        {"/./echo/./x/", "/echo/x/"},
        {"/x/%2e%2E/echo", "/echo"},
        {"/%65cho/%7Euser", "/echo/~user"},
        {"/echo/caf%c3%a9", "/echo/caf%C3%A9"},
        {"/echo;v=1", "/echo;v=1"},
        {"/echo?q=%2F&p=/../x", "/echo?q=%2F&p=/../x"},  // the query is forwarded byte for byte
    };
    for (const auto& [sent, expected] : forwarded) {
        CAPTURE(sent);
        CHECK(target_seen_by_upstream(get(sent)) == expected);
    }

    // Refused outright: 400 with the JSON reason, nothing forwarded.
    const auto before_refused = upstream_stat(*up, "requests");
    for (const char* target : {"/%2Flogin", "/login%00", "/%zz", "/a%5Clogin", "abc"}) {
        CAPTURE(target);
        auto r = get(target);
        CHECK(r.status == 400);
        if (r.status == 400) CHECK(json_of(r).at("error").as_string() == "bad_request");
    }
    auto connect =
        raw_exchange(gw->port, "CONNECT upstream.example:443 HTTP/1.1\r\nHost: upstream.example:443\r\n\r\n");
    CHECK(connect.status == 405);
    CHECK(upstream_stat(*up, "requests") == before_refused);
}

// A chunk-size line (with extensions) or a trailer without a line end was buffered
// whole: a client could grow a worker's memory without bound. Each is cut off at 64 KiB with a
// 400; sending 64 MiB leaves the gateway's peak resident set within 16 MiB of where it was.
TEST_CASE("a chunk line or trailer without an end does not grow the gateway's memory") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {{"server.threads", "1"}}), {}, bounded_quarantine_env());
    INFO("gateway output:\n", gw->proc->output());
    REQUIRE(fetch(gw->port, "POST", "/warm-up", {{"Transfer-Encoding", "chunked"}}, "5\r\nhello\r\n0\r\n\r\n").status ==
            200);
    const long slack_kib = runs_with_asan(gw->proc->pid()) ? 48 * 1024 : 16 * 1024;
    constexpr std::uint64_t flood_bytes = 64ull * 1024 * 1024;
    const std::string head = "POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n";
    struct variant {
        const char* name;
        std::string prefix;
        char fill;
    };
    const variant variants[] = {
        {"chunk extension", "5;ext=", 'a'},
        {"chunk-size line", "", '0'},  // leading zeros: never too large, never ending
        {"trailer", "0\r\nX-Trailer: ", 'a'},
    };
    for (const auto& v : variants) {
        CAPTURE(v.name);
        const long before = proc_status_kib(gw->proc->pid(), "VmHWM");
        REQUIRE(before > 0);
        connection c("127.0.0.1", gw->port, 2s);
        c.send(head + v.prefix);
        const std::string piece(64 * 1024, v.fill);
        std::uint64_t sent = 0;
        std::string answer;
        while (sent < flood_bytes && answer.empty()) {
            try {
                c.send(piece);
            } catch (const std::exception&) {
                break;  // the gateway stopped reading, or closed
            }
            sent += piece.size();
            answer = c.read_available(0ms);
        }
        if (answer.empty()) answer = c.read_available(2s);
        const long after = proc_status_kib(gw->proc->pid(), "VmHWM");
        CAPTURE(sent);
        CAPTURE(before);
        CAPTURE(after);
        CHECK(answer.rfind("HTTP/1.1 400", 0) == 0);
        CHECK(sent < flood_bytes);
        CHECK(after - before < slack_kib);
    }
    CHECK(fetch(gw->port, "GET", "/after").status == 200);
}

// Only the first of several X-Forwarded-For fields was forwarded (the others were
// dropped), and X-Forwarded-Proto was always overwritten, even from a trusted proxy.
TEST_CASE("X-Forwarded-For fields are joined, a trusted proxy's X-Forwarded-Proto is kept") {
    auto up = start_upstream();
    const std::string raw =
        "GET /echo HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 6.6.6.6\r\n"
        "X-Forwarded-Proto: https\r\n\r\n";
    auto forwarded = [&](const gateway& gw, const std::string& request) {
        auto r = raw_exchange(gw.port, request);
        REQUIRE(r.status == 200);
        return json_of(r);
    };
    auto count = [](const boost::json::object& echo, std::string_view name) {
        int n = 0;
        for (const auto& [k, v] : echoed_headers(echo))
            if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
                    return std::tolower(a) == std::tolower(b);
                }))
                ++n;
        return n;
    };
    {
        auto gw = start_gateway(gateway_yaml(up->port, {{"clients.trusted_proxies", "[\"127.0.0.1/32\"]"}}));
        auto echo = forwarded(*gw, raw);
        CHECK(count(echo, "X-Forwarded-For") == 1);
        CHECK(echoed(echo, "X-Forwarded-For") == "1.1.1.1, 6.6.6.6, 127.0.0.1");
        CHECK(count(echo, "X-Forwarded-Proto") == 1);
        CHECK(echoed(echo, "X-Forwarded-Proto") == "https");
        auto odd = forwarded(*gw, "GET /echo HTTP/1.1\r\nHost: test\r\nX-Forwarded-Proto: gopher\r\n\r\n");
        CHECK(echoed(odd, "X-Forwarded-Proto") == "http");
    }
    {
        auto gw = start_gateway(gateway_yaml(up->port));  // no trusted proxies
        auto echo = forwarded(*gw, raw);
        CHECK(count(echo, "X-Forwarded-For") == 1);
        CHECK(echoed(echo, "X-Forwarded-For") == "1.1.1.1, 6.6.6.6, 127.0.0.1");
        CHECK(count(echo, "X-Forwarded-Proto") == 1);
        CHECK(echoed(echo, "X-Forwarded-Proto") == "http");
    }
}

TEST_CASE("the Host and method a route sees are the ones the upstream gets") {
    auto up = start_upstream();
    const std::string config = R"(
policies:
  admin:
    ip: [ {limit: 2, per: 1m} ]
routes:
  - { match: { host: admin.example, methods: [POST], path_prefix: / }, policy: admin }
  - { match: { path_prefix: / }, policy: none }
)";
    auto gw = start_gateway(gateway_yaml(up->port, {}, config));
    auto post = [&](const std::string& method, const std::string& headers) {
        return raw_exchange(gw->port, method + " /x HTTP/1.1\r\n" + headers + "Content-Length: 0\r\n\r\n");
    };
    // Two admitted, then limited, however the host is spelled or hidden.
    CHECK(post("POST", "Host: admin.example\r\n").status == 200);
    CHECK(post("POST", "Host: ADMIN.example.\r\n").status == 200);
    CHECK(post("POST", "Host: admin.example:80\r\n").status == 429);
    // `Connection: host` cannot take the routed Host away from the upstream.
    auto hidden = post("POST", "Host: admin.example\r\nConnection: host\r\n");
    CHECK(hidden.status == 429);
    // Two Host fields, at any version, and a method in lower case are refused.
    CHECK(post("POST", "Host: other.example\r\nHost: admin.example\r\n").status == 400);
    CHECK(raw_exchange(gw->port, "POST /x HTTP/1.0\r\nHost: a\r\nHost: admin.example\r\nContent-Length: 0\r\n\r\n")
              .status == 400);
    CHECK(post("post", "Host: admin.example\r\n").status == 400);
    // Only WebSocket upgrades: h2c goes upstream as a plain request, without Upgrade.
    auto h2c = raw_exchange(gw->port,
                            "GET /echo HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                            "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n");
    REQUIRE(h2c.status == 200);
    CHECK(echoed(json_of(h2c), "Upgrade").empty());
}
