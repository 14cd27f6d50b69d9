// The admin listener, the command line, and a graceful stop.
#include "e2e.hpp"

#include <sys/socket.h>

#include <csignal>
#include <vector>

using namespace sluice::test;

TEST_CASE("admin: healthz, readyz, 404") {
    proxy_fixture f;
    auto h = fetch(f.gw->admin_port, "GET", "/healthz");
    CHECK(h.status == 200);
    CHECK(json_of(h).at("status").as_string() == "ok");
    CHECK(fetch(f.gw->admin_port, "GET", "/readyz").status == 200);
    CHECK(fetch(f.gw->admin_port, "GET", "/nope").status == 404);
}

TEST_CASE("admin: /metrics counts requests by route and status class") {
    proxy_fixture f;
    for (int i = 0; i < 3; ++i) CHECK(f.get("/ok").status == 200);
    CHECK(f.get("/status?code=404").status == 404);
    connection open("127.0.0.1", f.gw->port);
    open.send(make_request("GET", "/held"));
    CHECK(open.read_response().status == 200);

    CHECK(eventually_metric(f.gw->admin_port, "sluice_request_duration_seconds_count", 5) == 5);
    auto r = fetch(f.gw->admin_port, "GET", "/metrics");
    CHECK(r.status == 200);
    CHECK(r.header("Content-Type").rfind("text/plain; version=0.0.4", 0) == 0);
    const auto& m = r.body;
    CHECK(metric_value(m, "sluice_requests_total{route=\"unmatched\",status=\"2xx\"}") == 4);
    CHECK(metric_value(m, "sluice_requests_total{route=\"unmatched\",status=\"4xx\"}") == 1);
    CHECK(metric_value(m, "sluice_request_duration_seconds_count") == 5);
    CHECK(metric_value(m, "sluice_request_duration_seconds_bucket{le=\"+Inf\"}") == 5);
    // The held connection (earlier fetch() connections may still be closing).
    CHECK(eventually_metric(f.gw->admin_port, "sluice_client_connections", 1) == 1);
    CHECK(metric_value(m, "sluice_upstream_idle_connections") >= 1);
    for (const char* family :
         {"# TYPE sluice_requests_total counter", "# TYPE sluice_request_duration_seconds histogram",
          "# TYPE sluice_upstream_errors_total counter", "# TYPE sluice_client_connections gauge",
          "# TYPE sluice_upstream_idle_connections gauge"})
        CHECK_MESSAGE(m.find(family) != std::string::npos, family);
}

// Issue 21: 64 connections that never finish a header held every admin slot, and a probe was
// closed at accept. A new connection now closes the one that has waited longest.
TEST_CASE("admin: probes are answered while 70 slow connections are open") {
    proxy_fixture f;
    std::vector<connection> slow;
    for (int i = 0; i < 70; ++i) {
        slow.emplace_back("127.0.0.1", f.gw->admin_port, 5s);
        slow.back().send("GET /healthz HTTP/1.1\r\nHost: t\r\n");
    }
    for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
        CAPTURE(path);
        connection probe("127.0.0.1", f.gw->admin_port, 2s);
        probe.send(make_request("GET", path));
        CHECK(probe.read_response().status == 200);
    }
    // The oldest made room (73 connections over a cap of 64).
    CHECK(slow.front().wait_closed(5s));
    CHECK_NOTHROW(f.gw->proc->wait_for_line("closing those waiting longest", 5s));
}

TEST_CASE("admin: a header not finished within server.header_timeout is cut off") {
    proxy_fixture f(yaml_overrides{{"server.header_timeout", "300ms"}});
    connection c("127.0.0.1", f.gw->admin_port, 5s);
    c.send("GET /healthz HTTP/1.1\r\nHost: t\r\n");
    CHECK(c.wait_closed(5s));
}

// Issue 21: a request header over the admin's 16 KiB limit was answered 413.
TEST_CASE("admin: a 20 KB request header is answered 431 with a JSON reason") {
    proxy_fixture f;
    connection c("127.0.0.1", f.gw->admin_port, 5s);
    c.send(make_request("GET", "/healthz", {{"X-Filler", std::string(20 * 1024, 'a')}}));
    auto r = c.read_response();
    CHECK(r.status == 431);
    CHECK(r.header("Content-Type") == "application/json");
    CHECK(json_of(r).at("error").as_string() == "header_too_large");
}

// Issue 21: the admin closed with the body unread, and the reset could beat its 413 to the
// client. It now stops sending and drains the rest before closing.
TEST_CASE("admin: POST /reload with a 1 MB body: the client reads the 413") {
    proxy_fixture f;
    for (int i = 0; i < 3; ++i) {
        CAPTURE(i);
        connection c("127.0.0.1", f.gw->admin_port, 5s);
        // A fixed send buffer (no autotuning up to 4 MiB): the body cannot all sit in kernel
        // buffers, so the client is still sending when the gateway is done with the request.
        const int sndbuf = 64 * 1024;
        REQUIRE(::setsockopt(c.fd(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) == 0);
        c.send(make_request("POST", "/reload", {}, std::string(1'000'000, 'x')));
        auto r = c.read_response();
        CHECK(r.status == 413);
        CHECK(json_of(r).at("error").as_string() == "payload_too_large");
        CHECK(c.wait_closed(5s));
    }
}

// Issue 21: GET /top?n=5&n=6 was answered 200 where every other bad query is a 400.
TEST_CASE("admin: GET /top with a repeated parameter is a 400 with a JSON reason") {
    proxy_fixture f;
    for (const char* target : {"/top?n=5&n=6", "/top?n=5&n=5"}) {
        CAPTURE(target);
        auto r = fetch(f.gw->admin_port, "GET", target);
        CHECK(r.status == 400);
        CHECK(r.header("Content-Type") == "application/json");
        CHECK(json_of(r).at("error").as_string() == "bad_request");
        CHECK(json_of(r).at("message").as_string() == "n is given more than once");
    }
    CHECK(fetch(f.gw->admin_port, "GET", "/top?n=5").status == 200);
}

TEST_CASE("--check validates the config file") {
    auto dir = make_temp_dir();
    write_file(dir + "/good.yaml", "upstream: { url: \"http://127.0.0.1:3000\" }\n");
    write_file(dir + "/bad.yaml", "upstream: { url: \"http://127.0.0.1:3000\" }\nserver: { treads: 2 }\n");
    process good({sluice_bin(), "--config", dir + "/good.yaml", "--check"});
    CHECK(good.wait_exit(10s) == 0);
    process bad({sluice_bin(), "--config", dir + "/bad.yaml", "--check"});
    CHECK(bad.wait_exit(10s) == 1);
    CHECK(bad.output().find(dir + "/bad.yaml:2:11: server.treads: unknown key") != std::string::npos);
    process usage({sluice_bin(), "--bogus"});
    CHECK(usage.wait_exit(10s) == 2);
    process version({sluice_bin(), "--version"});
    CHECK(version.wait_exit(10s) == 0);
    CHECK(version.output().rfind("sluice ", 0) == 0);
}

TEST_CASE("SIGTERM: stop accepting, finish in-flight requests, exit 0") {
    proxy_fixture f;
    connection c("127.0.0.1", f.gw->port);
    auto before = f.upstream_stats().at("requests").to_number<std::int64_t>();
    c.send(make_request("GET", "/slow?ms=700"));
    // Wait until the request is at the upstream.
    REQUIRE(eventually([&] { return f.upstream_stats().at("requests").to_number<std::int64_t>() >= before + 1; }));
    f.gw->proc->signal(SIGTERM);
    f.gw->proc->wait_for_line("stopped accepting");
    CHECK_THROWS(connection("127.0.0.1", f.gw->port, 1s).send(make_request("GET", "/late")));
    auto r = c.read_response();
    CHECK(r.status == 200);
    CHECK(r.body == "slow");
    CHECK(r.header("Connection") == "close");
    CHECK(f.gw->proc->wait_exit(10s) == 0);
}

TEST_CASE("SIGTERM: requests still running at drain_timeout are cut, exit is still 0") {
    proxy_fixture f(yaml_overrides{{"server.drain_timeout", "300ms"}});
    connection c("127.0.0.1", f.gw->port);
    auto before = f.upstream_stats().at("requests").to_number<std::int64_t>();
    c.send(make_request("GET", "/slow?ms=10000"));
    REQUIRE(eventually([&] { return f.upstream_stats().at("requests").to_number<std::int64_t>() >= before + 1; }));
    f.gw->proc->signal(SIGTERM);
    CHECK(f.gw->proc->wait_exit(5s) == 0);
    CHECK(c.wait_closed(5s));
}
