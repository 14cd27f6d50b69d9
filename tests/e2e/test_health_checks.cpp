// Active health checks through the real gateway binary, in front of real test upstreams
// (each started with --name, so that a response tells which one answered): a server whose
// /healthz fails is taken out after `unhealthy` checks and back after `healthy` passes, each
// change logged once; a killed server is taken out; a pool with every server down answers
// 502 at once; the checks run once per gateway, not once per worker; an https server that
// does not speak TLS fails its checks.
#include "e2e.hpp"

#include <csignal>

using namespace sluice::test;

namespace {

std::unique_ptr<upstream_server> start_named(const std::string& name) {
    auto up = std::make_unique<upstream_server>(
        std::vector<std::string>{upstream_bin(), "--listen", "127.0.0.1:0", "--name", name});
    auto groups = up->proc.wait_for_line(R"(^listening on 127\.0\.0\.1:(\d+)$)");
    up->port = static_cast<std::uint16_t>(std::stoi(groups.at(1)));
    return up;
}

std::string url_of(const upstream_server& up, const std::string& scheme = "http") {
    return "\"" + scheme + "://127.0.0.1:" + std::to_string(up.port) + "\"";
}

// The pool `default` of `servers` (urls, quoted), checked every 200 ms; passive ejection and
// retries off, so that only the checks decide.
std::string checked_yaml(const std::vector<std::string>& servers, int threads = 2) {
    std::string list;
    bool https = false;
    for (const auto& s : servers) {
        list += (list.empty() ? "" : ", ") + s;
        https = https || s.starts_with("\"https:");
    }
    return "server: { listen: \"127.0.0.1:0\", threads: " + std::to_string(threads) +
           " }\n"
           "admin: { listen: \"127.0.0.1:0\" }\n"
           "log: { level: info }\n"
           "upstream:\n"
           "  servers: [" +
           list +
           "]\n"
           "  connect_timeout: 5s\n"
           "  retries: 0\n" +
           (https ? "  tls: { verify: false }\n" : "") +
           "  health:\n"
           "    path: /healthz\n"
           "    interval: 200ms\n"
           "    timeout: 150ms\n"
           "    healthy: 2\n"
           "    unhealthy: 3\n"
           "    passive: { eject_after: 0 }\n";
}

std::string checked_yaml_http(const std::vector<const upstream_server*>& ups, int threads = 2) {
    std::vector<std::string> urls;
    for (const auto* u : ups) urls.push_back(url_of(*u));
    return checked_yaml(urls, threads);
}

// Which upstream answered a request through the gateway ("status N" for an error).
std::string who(const gateway& gw) {
    const auto r = fetch(gw.port, "GET", "/echo");
    return r.status == 200 ? r.header("X-Upstream-Name") : "status " + std::to_string(r.status);
}

// Whether, within `limit`, `run` requests in a row are answered by servers other than `name`
// (and without an error).
bool stays_away(const gateway& gw, const std::string& name, int run = 20, std::chrono::seconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int row = 0;
    for (int i = 0; i < 200000 && std::chrono::steady_clock::now() < deadline; ++i) {
        const auto w = who(gw);
        if (w == name || w.starts_with("status ")) {
            row = 0;
            continue;
        }
        if (++row == run) return true;
    }
    return false;
}

// Whether `n` requests in a row are answered 200.
bool all_ok(const gateway& gw, int n) {
    for (int i = 0; i < n; ++i)
        if (fetch(gw.port, "GET", "/echo").status != 200) return false;
    return true;
}

// Whether, within `limit`, a request is answered by `name`.
bool reaches(const gateway& gw, const std::string& name, std::chrono::seconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (int i = 0; i < 200000 && std::chrono::steady_clock::now() < deadline; ++i)
        if (who(gw) == name) return true;
    return false;
}

std::size_t count_of(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
    return n;
}

// The health checks the upstream has received (its /healthz requests).
std::int64_t checks_at(const upstream_server& up) {
    return json_of(fetch(up.port, "GET", "/stats")).at("healthz").as_int64();
}

// Waits until `up` has received `more` further checks (bounded).
bool checked_again(const upstream_server& up, std::int64_t more) {
    const auto from = checks_at(up);
    return eventually([&] { return checks_at(up) >= from + more; });
}

std::string label(const upstream_server& up) { return "127.0.0.1:" + std::to_string(up.port); }

// Waits out a stretch of time that is the subject of the test (checks counted over it), not
// a synchronisation.
void let_time_pass(std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

}  // namespace

TEST_CASE("health checks: a failing /healthz takes a server out after `unhealthy` checks, passes bring it back") {
    auto a = start_named("a");
    auto b = start_named("b");
    auto c = start_named("c");
    auto gw = start_gateway(checked_yaml_http({a.get(), b.get(), c.get()}));

    // Every server takes requests at first.
    for (const auto* name : {"a", "b", "c"}) REQUIRE(reaches(*gw, name));

    const auto down_line = "upstream default: server " + label(*b) + " is down: status 503 (3 failed checks in a row)";
    const auto started = std::chrono::steady_clock::now();
    REQUIRE(fetch(b->port, "GET", "/control?health=503").status == 200);
    CHECK(stays_away(*gw, "b"));
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    MESSAGE("b out of rotation " << took.count() << " ms after its /healthz turned 503 (interval 200 ms x 3)");
    CHECK_NOTHROW(gw->proc->wait_for_line("is down: status 503"));
    // More failed checks change nothing: the state change is logged once.
    REQUIRE(checked_again(*b, 3));
    CHECK(count_of(gw->proc->output(), down_line) == 1);
    CHECK(count_of(gw->proc->output(), "is down") == 1);
    // Still out while its checks fail.
    CHECK(stays_away(*gw, "b", 30));

    REQUIRE(fetch(b->port, "GET", "/control?health=0").status == 200);
    CHECK(reaches(*gw, "b"));
    const auto up_line = "upstream default: server " + label(*b) + " is up again (2 passed checks in a row)";
    CHECK_NOTHROW(gw->proc->wait_for_line("is up again"));
    REQUIRE(checked_again(*b, 3));
    CHECK(count_of(gw->proc->output(), up_line) == 1);
    CHECK(count_of(gw->proc->output(), "is up again") == 1);
    CHECK(count_of(gw->proc->output(), "is down") == 1);
    for (const auto* name : {"a", "b", "c"}) CHECK(reaches(*gw, name));
}

TEST_CASE("health checks: a killed server is taken out, and with every server down the pool answers 502 at once") {
    auto a = start_named("a");
    auto b = start_named("b");
    auto c = start_named("c");
    auto gw = start_gateway(checked_yaml_http({a.get(), b.get(), c.get()}));
    for (const auto* name : {"a", "b", "c"}) REQUIRE(reaches(*gw, name));

    c->proc.signal(SIGKILL);
    REQUIRE(c->proc.wait_exit(5s).has_value());
    CHECK_NOTHROW(gw->proc->wait_for_line("server " + label(*c) + " is down: connect refused \\(3 failed checks"));
    // Nothing goes to it now: with retries off, a request sent there would be a 502.
    CHECK(all_ok(*gw, 30));

    // a and b stay alive but would answer slowly (3 s) a request sent to them, and their checks
    // fail: once both are down, the 502 must not wait for them.
    for (const auto* up : {a.get(), b.get()}) {
        REQUIRE(fetch(up->port, "GET", "/control?delay_ms=3000").status == 200);
        REQUIRE(fetch(up->port, "GET", "/control?health=503").status == 200);
    }
    for (const auto* up : {a.get(), b.get()})
        CHECK_NOTHROW(gw->proc->wait_for_line("server " + label(*up) + " is down: status 503"));
    const auto started = std::chrono::steady_clock::now();
    const auto r = fetch(gw->port, "GET", "/echo");
    const auto took = std::chrono::steady_clock::now() - started;
    CHECK(r.status == 502);
    CHECK(r.body == R"({"error":"bad_gateway","message":"no upstream server is available"})");
    CHECK(took < 2s);  // not sent on: the servers' answer would take 3 s, a connect up to 5 s
    MESSAGE("502 with every server down in " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                             << " ms");

    // One comes back: requests reach it again (a normal speed first).
    REQUIRE(fetch(a->port, "GET", "/control?delay_ms=0&health=0").status == 200);
    CHECK(reaches(*gw, "a"));
}

TEST_CASE("health checks: once per gateway, not once per worker") {
    auto a = start_named("a");
    auto gw = start_gateway(checked_yaml_http({a.get()}, 4));
    // The first check has run: the upstream received it.
    REQUIRE(eventually([&] { return checks_at(*a) >= 1; }));
    const auto from = checks_at(*a);
    const auto started = std::chrono::steady_clock::now();
    let_time_pass(2s);
    const auto checks = checks_at(*a) - from;
    const double intervals =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started) / std::chrono::milliseconds(200);
    MESSAGE(checks << " checks over " << intervals << " intervals with 4 workers");
    CHECK(checks >= 3);                                         // they do run (a slow machine may skip some)
    CHECK(static_cast<double>(checks) <= intervals * 1.5 + 2);  // per worker they would be 4x
    // The checks keep nothing running at exit.
    gw->proc->signal(SIGTERM);
    CHECK(gw->proc->wait_exit(5s) == std::optional<int>(0));
}

TEST_CASE(
    "health checks: an https server that does not speak TLS fails its checks, and a reload without checks brings it "
    "back") {
    auto a = start_named("a");
    auto b = start_named("b");
    // b is listed as https, yet answers plain HTTP: its handshakes fail.
    auto gw = start_gateway(checked_yaml({url_of(*a), url_of(*b, "https")}));
    CHECK_NOTHROW(gw->proc->wait_for_line("server " + label(*b) + " is down: TLS handshake failed"));
    CHECK(all_ok(*gw, 20));  // a request sent to b would fail (502); none goes there

    // A reload that keeps the checks keeps b down (the server is taken over, state and all),
    // with no new log line; one without checks brings it up.
    write_file(gw->config_path, checked_yaml({url_of(*a), url_of(*b, "https")}) + "# again\n");
    gw->proc->signal(SIGHUP);
    REQUIRE_NOTHROW(gw->proc->wait_for_line("reloaded "));
    REQUIRE(checked_again(*a, 3));
    CHECK(count_of(gw->proc->output(), "is down") == 1);
    CHECK(count_of(gw->proc->output(), "is up again") == 0);

    auto without = checked_yaml({url_of(*a), url_of(*b, "https")});
    without.replace(without.find("    path: /healthz\n"), std::string("    path: /healthz\n").size(), "");
    write_file(gw->config_path, without);
    gw->proc->signal(SIGHUP);
    CHECK_NOTHROW(gw->proc->wait_for_line("server " + label(*b) + " is up again \\(active checks are off\\)"));
}
