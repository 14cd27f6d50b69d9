// Limits, timeouts, malformed input and upstream failures, through the real gateway binary.
#include "e2e.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace sluice::test;

namespace {

// A loopback port with nothing listening (bound, then closed).
std::uint16_t closed_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

// A listener whose accept queue is full and never drained: new SYNs are dropped, so a
// connect to it hangs until the connector gives up.
struct black_hole {
    black_hole() {
        fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        REQUIRE(::listen(fd, 0) == 0);
        socklen_t len = sizeof a;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
        port = ntohs(a.sin_port);
        // The queue holds backlog + 1; once full, further connects time out.
        for (int i = 0; i < 3; ++i) {
            try {
                fillers.emplace_back(std::make_unique<connection>("127.0.0.1", port, 300ms));
            } catch (const std::exception&) {
                break;
            }
        }
    }
    ~black_hole() { ::close(fd); }
    int fd;
    std::uint16_t port;
    std::vector<std::unique_ptr<connection>> fillers;
};

}  // namespace

TEST_CASE("malformed requests get 400 and the connection is closed") {
    proxy_fixture f;
    auto before = f.upstream_stats().at("requests").to_number<std::int64_t>();
    const char* cases[] = {
        "GARBAGE\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: t\r\nBad Header Line\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",  // HTTP/1.1 without Host
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        // RFC 9112 section 6.1: Transfer-Encoding in HTTP/1.0 is faulty framing, even chunked.
        "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
    };
    for (const char* raw : cases) {
        CAPTURE(raw);
        connection c("127.0.0.1", f.gw->port);
        c.send(raw);
        auto r = c.read_response();
        CHECK(r.status == 400);
        CHECK(r.header("Content-Type") == "application/json");
        CHECK(json_of(r).at("error").as_string() == "bad_request");
        CHECK(c.wait_closed(5s));
    }
    // The smuggled "second request" in any of those bodies never reached the upstream as one.
    auto after = f.upstream_stats().at("requests").to_number<std::int64_t>();
    CHECK(after == before);
}

TEST_CASE("Sluice's own answers: Date on each, and Connection: keep-alive to an HTTP/1.0 client that keeps it") {
    auto up = start_upstream();
    const auto gone = closed_port();
    auto gw = start_gateway(gateway_yaml(up->port, {}, R"(
policies:
  one:
    ip: [ {limit: 1, per: 1h} ]
routes:
  - { match: { path_prefix: /limited }, policy: one }
)"));
    const std::regex imf_date(R"((Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT)");
    const std::string keep_10 = "GET /limited HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    // ab -k: HTTP/1.0 with keep-alive; it waits for a close unless told the connection stays.
    connection c("127.0.0.1", gw->port, 5s);
    c.send(keep_10);
    auto first = c.read_response();
    REQUIRE(first.status == 200);
    CHECK(first.header("Connection") == "keep-alive");
    CHECK(std::regex_match(first.header("Date"), imf_date));
    for (int i = 0; i < 3; ++i) {
        c.send(keep_10);
        auto r = c.read_response();  // framed by Content-Length, on the same connection
        REQUIRE(r.status == 429);
        CHECK(r.header("Connection") == "keep-alive");
        CHECK(std::regex_match(r.header("Date"), imf_date));
    }
    // Without keep-alive an HTTP/1.0 client is told the connection closes.
    connection once("127.0.0.1", gw->port, 5s);
    once.send("GET /limited HTTP/1.0\r\n\r\n");
    auto closing = once.read_response();
    CHECK(closing.status == 429);
    CHECK(closing.header("Connection") == "close");
    CHECK(once.wait_closed(5s));

    // A 400 has its Date too.
    connection bad("127.0.0.1", gw->port, 5s);
    bad.send("GET / HTTP/1.1\r\n\r\n");
    auto r400 = bad.read_response();
    CHECK(r400.status == 400);
    CHECK(std::regex_match(r400.header("Date"), imf_date));

    // A 502 to an HTTP/1.0 keep-alive client keeps the connection and says so.
    auto cut = start_gateway(gateway_yaml(gone));
    connection d("127.0.0.1", cut->port, 5s);
    for (int i = 0; i < 2; ++i) {
        d.send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        auto r = d.read_response();
        REQUIRE(r.status == 502);
        CHECK(r.header("Connection") == "keep-alive");
        CHECK(std::regex_match(r.header("Date"), imf_date));
    }
}

TEST_CASE("size limits: 431 for a large header, 413 for a large body") {
    proxy_fixture f(yaml_overrides{{"server.max_header_bytes", "2KiB"}, {"server.max_body_bytes", "1KiB"}});
    auto big_header = f.get("/", {{"X-Big", std::string(3000, 'h')}});
    CHECK(big_header.status == 431);
    CHECK(json_of(big_header).at("error").as_string() == "header_too_large");

    auto big_body = fetch(f.gw->port, "POST", "/", {}, std::string(2000, 'b'));
    CHECK(big_body.status == 413);

    connection c("127.0.0.1", f.gw->port);
    c.send("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; ++i) c.send("200\r\n" + std::string(512, 'c') + "\r\n");
    auto r = c.read_response();
    CHECK(r.status == 413);
    CHECK(c.wait_closed(5s));

    auto fine = fetch(f.gw->port, "POST", "/", {}, std::string(1000, 'b'));
    CHECK(fine.status == 200);
}

TEST_CASE("header_timeout answers 408, also to a slowloris client") {
    proxy_fixture f(yaml_overrides{{"server.header_timeout", "400ms"}});
    connection c("127.0.0.1", f.gw->port);
    c.send("GET / HTTP/1.1\r\nHost:");
    auto r = c.read_response();
    CHECK(r.status == 408);
    CHECK(c.wait_closed(5s));

    // Trickling a byte every 100 ms does not extend the deadline.
    connection slow("127.0.0.1", f.gw->port, 5s);
    std::string head = "GET / HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    std::string got;
    for (char ch : head) {
        try {
            slow.send(std::string(1, ch));
        } catch (const std::exception&) {
            break;
        }
        got = slow.read_available(100ms);
        if (!got.empty()) break;
    }
    CHECK(got.rfind("HTTP/1.1 408", 0) == 0);
}

TEST_CASE("idle keep-alive connections are closed after idle_timeout") {
    proxy_fixture f(yaml_overrides{{"server.idle_timeout", "300ms"}});
    connection c("127.0.0.1", f.gw->port);
    c.send(make_request("GET", "/"));
    CHECK(c.read_response().status == 200);
    CHECK(c.wait_closed(5s));
}

TEST_CASE("max_connections: connections beyond it are closed at once") {
    proxy_fixture f(yaml_overrides{{"server.threads", "1"}, {"server.max_connections", "2"}});
    connection a("127.0.0.1", f.gw->port), b("127.0.0.1", f.gw->port);
    a.send(make_request("GET", "/a"));
    b.send(make_request("GET", "/b"));
    CHECK(a.read_response().status == 200);
    CHECK(b.read_response().status == 200);
    connection extra("127.0.0.1", f.gw->port);
    CHECK(extra.wait_closed(5s));
    a.send(make_request("GET", "/still"));
    CHECK(a.read_response().status == 200);
    CHECK(metric_value(f.metrics(), "sluice_client_connections_rejected_total") >= 1);
}

TEST_CASE("upstream refused: 502 with a JSON reason, counted") {
    auto port = closed_port();
    auto gw = start_gateway(gateway_yaml(port));
    auto r = fetch(gw->port, "GET", "/");
    CHECK(r.status == 502);
    CHECK(json_of(r).at("error").as_string() == "bad_gateway");
    CHECK(eventually_metric(gw->admin_port, "sluice_requests_total{route=\"unmatched\",status=\"5xx\"}", 1) == 1);
    auto m = fetch(gw->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(m, "sluice_upstream_errors_total{kind=\"connect_refused\"}") == 1);
}

TEST_CASE("upstream connect timeout: 502") {
    black_hole hole;
    auto gw = start_gateway(gateway_yaml(hole.port, {{"upstream.connect_timeout", "200ms"}}));
    auto r = fetch(gw->port, "GET", "/");
    CHECK(r.status == 502);
    CHECK(std::string(json_of(r).at("message").as_string()).find("timed out") != std::string::npos);
    auto m = fetch(gw->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(m, "sluice_upstream_errors_total{kind=\"connect_timeout\"}") == 1);
}

TEST_CASE("upstream response timeout: 504") {
    proxy_fixture f(yaml_overrides{{"upstream.timeout", "200ms"}});
    auto r = f.get("/slow?ms=3000");
    CHECK(r.status == 504);
    CHECK(json_of(r).at("error").as_string() == "upstream_timeout");
    CHECK(metric_value(f.metrics(), "sluice_upstream_errors_total{kind=\"timeout\"}") == 1);
}

TEST_CASE("a client that leaves while the upstream works has its request given up at once, not at the timeout") {
    proxy_fixture f(yaml_overrides{{"upstream.timeout", "60s"}});
    {
        connection c("127.0.0.1", f.gw->port);
        c.send(make_request("GET", "/hold?name=left"));
        REQUIRE(eventually([&] { return f.upstream_stats().at("held").as_int64() == 1; }));
    }
    // Logged as 499 (a 4xx) when the gateway gives it up, long before upstream.timeout.
    CHECK(eventually_metric(f.gw->admin_port, "sluice_requests_total{route=\"unmatched\",status=\"4xx\"}", 1) == 1);
    CHECK(metric_value(f.metrics(), "sluice_upstream_errors_total{kind=\"timeout\"}") == 0);
    // A pipelined client is not mistaken for one that left: its next request waits its turn.
    connection p("127.0.0.1", f.gw->port);
    p.send(make_request("GET", "/hold?name=first") + make_request("GET", "/echo"));
    REQUIRE(eventually([&] { return f.upstream_stats().at("held").as_int64() == 2; }));
    REQUIRE(fetch(f.up->port, "GET", "/let-go?name=first").body == "1");
    CHECK(p.read_response().body == "held");
    CHECK(p.read_response().status == 200);
    fetch(f.up->port, "GET", "/let-go?name=left");
}

TEST_CASE("upstream closes or resets without answering: 502") {
    proxy_fixture f;
    CHECK(f.get("/close-early").status == 502);
    CHECK(f.get("/reset").status == 502);
    CHECK(metric_value(f.metrics(), "sluice_upstream_errors_total{kind=\"reset\"}") == 2);
}

TEST_CASE("a pooled connection the upstream closed is never used again") {
    proxy_fixture f;
    connection c("127.0.0.1", f.gw->port);
    c.send(make_request("GET", "/close-after"));
    CHECK(c.read_response().body == "bye");
    c.send(make_request("GET", "/next"));
    auto r = c.read_response();
    CHECK(r.status == 200);
    CHECK(json_of(r).at("target").as_string() == "/next");

    // The pool saw the upstream's FIN while the connection sat idle: a POST, which could
    // not be sent twice, goes out on a new connection rather than fail.
    c.send(make_request("POST", "/close-after", {}, "x"));
    CHECK(c.read_response().body == "bye");
    // The connection goes back to the pool a moment after the client read its answer; once
    // the upstream's FIN has arrived (it may be slow to send it on a busy machine), the pool
    // drops it. Waiting for 0 alone could pass before it was given back.
    const auto idle = [&] {
        return metric_value(fetch(f.gw->admin_port, "GET", "/metrics").body, "sluice_upstream_idle_connections");
    };
    eventually([&] { return idle() == 1; }, std::chrono::seconds(1));  // at most a sweep's period
    CHECK(eventually_metric(f.gw->admin_port, "sluice_upstream_idle_connections", 0) == 0);
    c.send(make_request("POST", "/never-twice", {{"Content-Length", "0"}}));
    auto post = c.read_response();
    CHECK(post.status == 200);
    CHECK(json_of(post).at("target").as_string() == "/never-twice");
}
