// A fleet of real gateways sharing one real redis-server.
#include "e2e.hpp"

#include <atomic>
#include <chrono>
#include <latch>
#include <map>
#include <mutex>
#include <thread>

using namespace sluice::test;
using namespace std::chrono;

namespace {

// A generous store timeout: on a loaded test machine a slow answer must not pass for an outage.
std::string redis_yaml(std::uint16_t redis_port, const std::string& on_error, const std::string& tiers) {
    return "store:\n  type: redis\n  on_error: " + on_error +
           "\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis_port) +
           "\"], timeout: 2s }\npolicies:\n  fleet:\n    ip: [ " + tiers +
           " ]\nroutes:\n  - { match: { path_prefix: / }, policy: fleet }\n";
}

struct fleet {
    fleet(std::size_t n, std::uint16_t redis_port, const std::string& on_error, const std::string& tiers) {
        up = start_upstream();
        for (std::size_t i = 0; i < n; ++i)
            gateways.push_back(start_gateway(gateway_yaml(up->port, {}, redis_yaml(redis_port, on_error, tiers)), {},
                                             {{"SLUICE_HASH_SECRET", "fleet-secret"}}));
        for (auto& g : gateways)
            REQUIRE(eventually([&] { return fetch(g->admin_port, "GET", "/readyz").status == 200; }));
    }
    std::unique_ptr<upstream_server> up;
    std::vector<std::unique_ptr<gateway>> gateways;
};

std::int64_t unix_ms() { return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count(); }

// Blocks until the wall clock is `offset_ms` into a window of `window_ms` (aligned to Unix time).
void align_to(std::int64_t window_ms, std::int64_t offset_ms) {
    eventually([&] { return unix_ms() % window_ms >= offset_ms && unix_ms() % window_ms < offset_ms + 50; },
               milliseconds(window_ms + 100));
}

}  // namespace

TEST_CASE("fleet: three gateways on one Redis admit exactly the limit in every window") {
    redis_server redis(unused_port());
    constexpr int limit = 30;
    constexpr std::int64_t window_ms = 2000;
    fleet f(3, redis.port, "deny", "{limit: 30, per: 2s, algorithm: fixed}");  // deny: an error is never an admission

    // Clients hammer one identifier (127.0.0.1) through every gateway, only in the middle
    // of each window (Redis' clock is this machine's), so the window of each admission is
    // known from when it was sent.
    std::mutex mu;
    std::map<std::int64_t, int> admitted, sent;
    std::atomic<int> errors{0};
    std::int64_t previous = 0;
    for (int round = 0; round < 2; ++round) {
        // A round can end well inside its window (429s from the deny cache are quick), so
        // the next one waits for a new window before aligning.
        REQUIRE(eventually([&] { return unix_ms() / window_ms > previous; }, milliseconds(window_ms + 100)));
        align_to(window_ms, 300);
        const std::int64_t window = unix_ms() / window_ms;
        previous = window;
        const std::int64_t stop_at = window * window_ms + 1500;
        std::vector<std::thread> clients;
        for (int c = 0; c < 12; ++c)
            clients.emplace_back([&, c] {
                try {
                    connection conn("127.0.0.1", f.gateways[c % 3]->port);
                    for (int i = 0; i < 400 && unix_ms() < stop_at; ++i) {
                        conn.send(make_request("GET", "/fleet"));
                        auto r = conn.read_response();
                        std::lock_guard lock(mu);
                        ++sent[window];
                        if (r.status == 200)
                            ++admitted[window];
                        else if (r.status != 429)
                            ++errors;
                    }
                } catch (const std::exception&) {
                    ++errors;
                }
            });
        for (auto& t : clients) t.join();
    }
    CHECK(errors == 0);
    REQUIRE(admitted.size() == 2);
    for (auto [window, n] : admitted) {
        CAPTURE(window);
        CHECK(sent[window] > limit);  // demand exceeded the limit
        CHECK(n == limit);            // never one more, never one less
    }
    // The pipelining factor is visible: commands per socket write.
    auto m = fetch(f.gateways[0]->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(m, "sluice_redis_commands_total") > 0);
    CHECK(metric_value(m, "sluice_redis_writes_total") > 0);
}

TEST_CASE("fleet: checks asked together share an EVALSHA, and still admit exactly the limit") {
    redis_server redis(unused_port());
    constexpr int limit = 150, clients = 32, each = 10;
    fleet f(1, redis.port, "deny", "{limit: 150, per: 1h}");  // sliding: no window edge in the test
    std::atomic<int> admitted{0}, refused{0}, errors{0};
    std::latch go(clients + 1);
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c)
        threads.emplace_back([&] {
            try {
                connection conn("127.0.0.1", f.gateways[0]->port);
                go.arrive_and_wait();  // every client sends its first request at once
                for (int i = 0; i < each; ++i) {
                    conn.send(make_request("GET", "/together"));
                    const auto status = conn.read_response().status;
                    (status == 200 ? admitted : status == 429 ? refused : errors)++;
                }
            } catch (const std::exception&) {
                ++errors;
            }
        });
    go.arrive_and_wait();
    for (auto& t : threads) t.join();
    CHECK(errors == 0);
    CHECK(admitted == limit);
    CHECK(refused == clients * each - limit);
    // Some checks went several to an EVALSHA (the script's batch mode): more checks than
    // commands written, though the handshake's commands count as commands.
    const auto m = fetch(f.gateways[0]->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(m, "sluice_redis_checks_total") > metric_value(m, "sluice_redis_commands_total"));
    CHECK(metric_value(m, "sluice_redis_errors_total") == 0);
}

TEST_CASE("fleet: Redis down and back, with on_error allow") {
    redis_server redis(unused_port());
    const auto port = redis.port;
    fleet f(2, port, "allow", "{limit: 1000, per: 1h, precision: 6m}");
    CHECK(fetch(f.gateways[0]->port, "GET", "/").has_header("RateLimit"));

    redis.stop();
    for (auto& g : f.gateways)
        REQUIRE(eventually([&] { return fetch(g->admin_port, "GET", "/readyz").status == 503; }));
    for (int i = 0; i < 20; ++i) {
        const auto start = steady_clock::now();
        auto r = fetch(f.gateways[i % 2]->port, "GET", "/gap");
        CHECK(r.status == 200);  // fails open
        CHECK_FALSE(r.has_header("RateLimit"));
        // While disconnected a check fails at once: no request waits for the 2 s store timeout.
        CHECK(steady_clock::now() - start < milliseconds(1000));
    }
    auto m = fetch(f.gateways[0]->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(m, "sluice_store_errors_total") >= 10);

    redis_server again(port);
    const auto back = steady_clock::now();
    for (auto& g : f.gateways)
        REQUIRE(eventually([&] { return fetch(g->admin_port, "GET", "/readyz").status == 200; }, seconds(5)));
    MESSAGE("gateways ready again after ", duration_cast<milliseconds>(steady_clock::now() - back).count(), " ms");
    CHECK(steady_clock::now() - back < seconds(3));
    for (auto& g : f.gateways) {
        auto r = fetch(g->port, "GET", "/after");
        CHECK(r.status == 200);
        CHECK(r.has_header("RateLimit"));  // limited again: the script was loaded into the new Redis
    }
}

TEST_CASE("fleet: Redis down with on_error deny answers 503") {
    redis_server redis(unused_port());
    fleet f(2, redis.port, "deny", "{limit: 1000, per: 1h, precision: 6m}");
    CHECK(fetch(f.gateways[1]->port, "GET", "/").status == 200);
    redis.stop();
    for (auto& g : f.gateways)
        REQUIRE(eventually([&] { return fetch(g->admin_port, "GET", "/readyz").status == 503; }));
    for (int i = 0; i < 10; ++i) {
        auto r = fetch(f.gateways[i % 2]->port, "GET", "/gap");
        CHECK(r.status == 503);
        CHECK(json_of(r).at("error").as_string() == "store_unavailable");
    }
}

TEST_CASE("fleet: the local deny cache answers 429 without a round trip") {
    redis_server redis(unused_port());
    fleet f(1, redis.port, "allow", "{limit: 2, per: 1h, precision: 6m}");
    connection c("127.0.0.1", f.gateways[0]->port);
    std::vector<int> statuses;
    for (int i = 0; i < 6; ++i) {
        c.send(make_request("GET", "/"));
        statuses.push_back(c.read_response().status);
    }
    CHECK(statuses == std::vector<int>{200, 200, 429, 429, 429, 429});
    auto m = fetch(f.gateways[0]->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(m, "sluice_redis_deny_cache_hits_total") >= 3);
}

TEST_CASE("fleet: Redis down with on_error local decides on each gateway's share, then goes back") {
    redis_server redis(unused_port());
    const auto port = redis.port;
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {},
                                         "store:\n  type: redis\n  on_error: local\n  fleet_size: 2\n"
                                         "  redis: { nodes: [\"127.0.0.1:" +
                                             std::to_string(port) +
                                             "\"], timeout: 2s }\n"
                                             "clients: { trusted_proxies: [\"127.0.0.1/32\"] }\n"
                                             "policies:\n  fleet:\n    ip: [ {limit: 10, per: 1h, precision: 6m} ]\n"
                                             "routes:\n  - { match: { path_prefix: / }, policy: fleet }\n"),
                            {}, {{"SLUICE_HASH_SECRET", "fleet-secret"}});
    auto readyz = [&] { return fetch(gw->admin_port, "GET", "/readyz"); };
    auto from = [&](const std::string& ip) { return fetch(gw->port, "GET", "/", {{"X-Forwarded-For", ip}}); };
    auto lines = [&](const std::string& what) {
        const auto out = gw->proc->output();
        std::size_t n = 0;
        for (auto pos = out.find(what); pos != std::string::npos; pos = out.find(what, pos + 1)) ++n;
        return n;
    };
    const std::string degraded_line = "store degraded: the shared store does not answer";
    const std::string recovered_line = "store recovered: the shared store answers again";
    REQUIRE(eventually([&] { return readyz().body == R"({"status":"ready"})"; }));
    CHECK(metric_value(fetch(gw->admin_port, "GET", "/metrics").body, "sluice_store_degraded") == 0);

    // Shared: the whole limit.
    for (int i = 0; i < 10; ++i) {
        auto r = from("10.0.0.1");
        CHECK(r.status == 200);
        CHECK(r.header("RateLimit-Policy").find("q=10;") != std::string::npos);
    }
    CHECK(from("10.0.0.1").status == 429);

    redis.stop();
    REQUIRE(eventually([&] {
        auto r = readyz();
        return r.status == 200 && r.body == R"({"status":"degraded","store":"local"})";
    }));
    CHECK(eventually_metric(gw->admin_port, "sluice_store_degraded", 1) == 1);

    // Local: ceil(10 / 2) for an identity the shared store never saw.
    for (int i = 0; i < 5; ++i) {
        auto r = from("10.0.0.2");
        CHECK(r.status == 200);
        CHECK(r.header("RateLimit-Policy").find("q=5;") != std::string::npos);
    }
    auto denied = from("10.0.0.2");
    CHECK(denied.status == 429);
    CHECK(std::stoll(denied.header("Retry-After")) > 0);
    CHECK(eventually_metric(gw->admin_port, "sluice_store_local_decisions_total", 6) == 6);
    CHECK(eventually([&] { return lines(degraded_line) == 1; }));
    CHECK(lines(recovered_line) == 0);

    // Back: once both workers' connections are up, each worker returns to the shared store at its
    // first answer from it (new connections spread over the workers; fresh identities each time).
    redis_server again(port);
    REQUIRE(eventually_metric(gw->admin_port, "sluice_redis_connected", 2) == 2);
    int n = 0;
    REQUIRE(eventually([&] {
        ++n;  // a fresh address each time, however many requests the quiet second takes
        auto r = from("10.1." + std::to_string(n / 250 % 250) + "." + std::to_string(n % 250));
        CHECK(r.status == 200);
        CHECK(r.header("RateLimit-Policy").find("q=10;") != std::string::npos);
        return readyz().body == R"({"status":"ready"})";
    }));
    MESSAGE("back to the shared store after ", n, " requests");
    CHECK(eventually_metric(gw->admin_port, "sluice_store_degraded", 0) == 0);
    CHECK(eventually([&] { return lines(recovered_line) == 1; }));
    CHECK(lines(degraded_line) == 1);
    CHECK(metric_value(fetch(gw->admin_port, "GET", "/metrics").body, "sluice_store_local_decisions_total") == 6);
}

TEST_CASE("reload: store.on_error between allow and deny applies at once, to or from local it needs a restart") {
    auto up = start_upstream();
    const auto nobody = unused_port();  // no Redis: the store stays down, and the gateway listens at once
    auto yaml = [&](const std::string& on_error) {
        return gateway_yaml(up->port, {},
                            std::regex_replace(redis_yaml(nobody, on_error, "{limit: 10, per: 1h, precision: 6m}"),
                                               std::regex("timeout: 2s"), "timeout: 2s, start_timeout: 0s"));
    };
    auto gw = start_gateway(yaml("allow"));
    CHECK(fetch(gw->port, "GET", "/").status == 200);  // fails open
    CHECK(fetch(gw->admin_port, "GET", "/readyz").status == 503);

    write_file(gw->config_path, yaml("deny"));
    auto deny = fetch(gw->admin_port, "POST", "/reload");
    REQUIRE(deny.status == 200);
    CHECK(json_of(deny).at("restart_required").as_array().empty());
    CHECK(fetch(gw->port, "GET", "/").status == 503);

    write_file(gw->config_path,
               std::regex_replace(yaml("local"), std::regex("on_error: local"), "on_error: local\n  fleet_size: 3"));
    auto local = fetch(gw->admin_port, "POST", "/reload");
    REQUIRE(local.status == 200);
    auto local_body = json_of(local);
    const auto& keys = local_body.at("restart_required").as_array();
    CHECK(keys.size() == 2);
    CHECK(std::find(keys.begin(), keys.end(), boost::json::value("store.on_error")) != keys.end());
    CHECK(std::find(keys.begin(), keys.end(), boost::json::value("store.fleet_size")) != keys.end());
    CHECK(fetch(gw->port, "GET", "/").status == 503);  // still deny: the running store has no local fallback
    CHECK(json_of(fetch(gw->admin_port, "GET", "/readyz")).at("status").as_string() == "not_ready");
}

TEST_CASE("start: the proxy port opens once the store can decide, or after store.redis.start_timeout") {
    auto up = start_upstream();
    const auto port = unused_port();
    // on_error deny: any request decided before the store was ready would be a 503.
    auto gw = launch_gateway(gateway_yaml(up->port, {}, redis_yaml(port, "deny", "{limit: 100, per: 1h}")));
    gw->admin_port = static_cast<std::uint16_t>(
        std::stoi(gw->proc->wait_for_line(R"(admin listening on 127\.0\.0\.1:(\d+))").at(1)));
    auto ready = fetch(gw->admin_port, "GET", "/readyz");
    CHECK(ready.status == 503);
    CHECK(json_of(ready).at("reason").as_string().find("store") != std::string::npos);  // says why
    CHECK(!ready.header("Date").empty());
    CHECK(gw->proc->output().find("proxy listening") == std::string::npos);  // Redis is not there yet
    redis_server redis(port);
    gw->port = static_cast<std::uint16_t>(
        std::stoi(gw->proc->wait_for_line(R"(proxy listening on 127\.0\.0\.1:(\d+))").at(1)));
    for (int i = 0; i < 20; ++i) CHECK(fetch(gw->port, "GET", "/").status == 200);

    // No store within start_timeout: it listens then, and on_error decides meanwhile.
    const auto nobody = unused_port();
    auto late =
        start_gateway(gateway_yaml(up->port, {},
                                   std::regex_replace(redis_yaml(nobody, "deny", "{limit: 100, per: 1h}"),
                                                      std::regex("timeout: 2s"), "timeout: 2s, start_timeout: 200ms")));
    CHECK(fetch(late->port, "GET", "/").status == 503);
    CHECK(fetch(late->admin_port, "GET", "/readyz").status == 503);
    CHECK(late->proc->output().find("store.redis.start_timeout") != std::string::npos);
}
