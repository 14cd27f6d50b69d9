// The Redis store through Redis Sentinel: a real primary, a replica and three sentinels on
// loopback; gateways find the primary through the sentinels and follow a failover.
#include "e2e.hpp"

#include <atomic>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <regex>

using namespace sluice::test;
using namespace std::chrono;

namespace {

// In `dir`: a replica's full sync writes an RDB file there, whatever --save says.
std::unique_ptr<process> start_redis(const std::string& dir, std::uint16_t port, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1",
                                  "--save",       "",       "--appendonly",       "no",     "--maxmemory-policy",
                                  "noeviction"};
    argv.insert(argv.end(), {"--dir", dir, "--dbfilename", "redis-" + std::to_string(port) + ".rdb"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = std::make_unique<process>(std::move(argv));
    p->wait_for_line("Ready to accept connections");
    return p;
}

std::size_t count_of(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
    return n;
}

// A primary, one replica in sync, and three sentinels (quorum 2) that know both and each other.
struct sentinel_setup {
    sentinel_setup() : dir(make_temp_dir()) {
        primary_port = unused_port();
        replica_port = unused_port();
        primary = start_redis(dir, primary_port);
        replica = start_redis(dir, replica_port, {"--replicaof", "127.0.0.1", std::to_string(primary_port)});
        replica->wait_for_line("MASTER <-> REPLICA sync: (Finished with success|Master accepted a Partial)");
        for (int i = 0; i < 3; ++i) {
            const auto port = unused_port();
            const std::string conf = dir + "/sentinel" + std::to_string(i) + ".conf";  // Sentinel rewrites it
            write_file(conf, "port " + std::to_string(port) + "\nbind 127.0.0.1\ndir " + dir + "\nsentinel monitor " +
                                 master + " 127.0.0.1 " + std::to_string(primary_port) +
                                 " 2\nsentinel down-after-milliseconds " + master +
                                 " 1000\nsentinel failover-timeout " + master + " 4000\n");
            sentinel_ports.push_back(port);
            sentinels.push_back(
                std::make_unique<process>(std::vector<std::string>{"redis-server", conf, "--sentinel"}));
        }
        // A failover needs the replica known and a majority of sentinels that know each other.
        for (auto& s : sentinels) {
            s->wait_for_line("\\+slave slave 127\\.0\\.0\\.1:" + std::to_string(replica_port));
            REQUIRE(eventually([&] { return count_of(s->output(), "+sentinel sentinel") >= 2; }, seconds(15)));
        }
    }
    ~sentinel_setup() {
        sentinels.clear();
        replica.reset();
        primary.reset();
        if (!std::getenv("SLUICE_TEST_KEEP_TMP")) std::filesystem::remove_all(dir);
    }
    std::string sentinel_list() const {
        std::string out;
        for (auto p : sentinel_ports)
            out += (out.empty() ? "\"127.0.0.1:" : ", \"127.0.0.1:") + std::to_string(p) + "\"";
        return out;
    }

    const std::string master = "sluice-primary";
    std::string dir;
    std::uint16_t primary_port = 0, replica_port = 0;
    std::unique_ptr<process> primary, replica;
    std::vector<std::uint16_t> sentinel_ports;
    std::vector<std::unique_ptr<process>> sentinels;
};

// /exact: 5 per hour per client address (from X-Forwarded-For); /load: a limit never
// reached, in one fixed window of a year, whose remaining count shows what Redis holds.
std::string sentinel_yaml(const sentinel_setup& s) {
    return "store:\n  type: redis\n  on_error: deny\n  redis: { timeout: 200ms, sentinel: { master: " + s.master +
           ", nodes: [" + s.sentinel_list() +
           "] } }\nclients: { trusted_proxies: [\"127.0.0.1/32\"] }\n"
           "policies:\n  exact:\n    ip: [ {limit: 5, per: 1h} ]\n"
           "  load:\n    ip: [ {limit: 1000000, per: 8760h, algorithm: fixed} ]\n"
           "routes:\n  - { match: { path_prefix: /load }, policy: load }\n"
           "  - { match: { path_prefix: / }, policy: exact }\n";
}

bool ready(const gateway& g) { return fetch(g.admin_port, "GET", "/readyz").status == 200; }

// Requests from `ip` to /exact, alternating between the gateways: how many were admitted.
int admitted(const std::vector<std::unique_ptr<gateway>>& gws, const std::string& ip, int n) {
    int ok = 0;
    for (int i = 0; i < n; ++i)
        ok += fetch(gws[i % gws.size()]->port, "GET", "/exact", {{"X-Forwarded-For", ip}}).status == 200;
    return ok;
}

// The r= of the RateLimit field, or -1.
long remaining(const response& r) {
    std::smatch m;
    const std::string value = r.header("RateLimit");
    if (std::regex_search(value, m, std::regex(";r=(\\d+)"))) return std::stol(m[1]);
    return -1;
}

}  // namespace

TEST_CASE("redis sentinel: two gateways admit exactly the limit, and follow a failover under load") {
    sentinel_setup s;
    auto up = start_upstream();
    std::vector<std::unique_ptr<gateway>> gws;
    for (int i = 0; i < 2; ++i) gws.push_back(start_gateway(gateway_yaml(up->port, {}, sentinel_yaml(s))));
    for (auto& g : gws) REQUIRE(eventually([&] { return ready(*g); }));
    gws[0]->proc->wait_for_line("sentinel 127\\.0\\.0\\.1:\\d+ names 127\\.0\\.0\\.1:" +
                                std::to_string(s.primary_port) + " as the primary of " + s.master);
    CHECK(admitted(gws, "10.3.0.1", 12) == 5);

    // Clients send on one identifier through both gateways while the primary is killed.
    std::atomic<bool> stop{false};
    std::atomic<long> ok{0}, denied{0}, errors{0}, slowest_ms{0};
    std::vector<std::thread> clients;
    // A failed REQUIRE below leaves through here: the clients stop and are joined, so the
    // failure is reported (not a std::terminate on a joinable thread).
    struct joiner {
        std::atomic<bool>& stop;
        std::vector<std::thread>& threads;
        ~joiner() {
            stop = true;
            for (auto& t : threads)
                if (t.joinable()) t.join();
        }
    } join_clients{stop, clients};
    for (int c = 0; c < 4; ++c)
        clients.emplace_back([&, c] {
            const auto until = steady_clock::now() + seconds(40);  // bound, should stop() never come
            while (!stop && steady_clock::now() < until) {
                const auto start = steady_clock::now();
                int status = 0;
                try {
                    status = fetch(gws[c % 2]->port, "GET", "/load", {{"X-Forwarded-For", "10.3.9.9"}}).status;
                } catch (const std::exception&) {
                }
                const long ms = duration_cast<milliseconds>(steady_clock::now() - start).count();
                long seen = slowest_ms;
                while (ms > seen && !slowest_ms.compare_exchange_weak(seen, ms)) {
                }
                (status == 200 ? ok : status == 503 ? denied : errors)++;
            }
        });
    REQUIRE(eventually([&] { return ok > 300; }, seconds(20)));
    const auto killed = steady_clock::now();
    s.primary->signal(SIGKILL);
    for (auto& g : gws)
        REQUIRE(eventually([&] { return fetch(g->admin_port, "GET", "/readyz").status == 503; }, seconds(5)));
    for (auto& g : gws)
        g->proc->wait_for_line("names 127\\.0\\.0\\.1:" + std::to_string(s.replica_port) + " as the primary", 20s);
    for (auto& g : gws) REQUIRE(eventually([&] { return ready(*g); }, seconds(10)));
    const auto back_after = duration_cast<milliseconds>(steady_clock::now() - killed).count();
    const long ok_at_recovery = ok;
    REQUIRE(eventually([&] { return ok > ok_at_recovery + 100; }, seconds(10)));  // admitting again
    stop = true;
    for (auto& t : clients) t.join();

    CHECK(errors == 0);
    CHECK(denied > 0);         // the outage was seen (on_error deny)
    CHECK(slowest_ms < 2000);  // no request waited past the 200 ms timeout plus slack
    // What the new primary holds for the loaded identifier against what the clients were
    // told was admitted: the difference is what the failover forgot.
    auto last = fetch(gws[0]->port, "GET", "/load", {{"X-Forwarded-For", "10.3.9.9"}});
    REQUIRE(last.status == 200);
    const long held = 1000000 - remaining(last);  // this request included
    const long told = ok + 1;
    MESSAGE("failover: gateways ready ", back_after, " ms after SIGKILL; ", told, " admissions answered, ", held,
            " held by the new primary (forgotten: ", told - held, "); slowest request ", slowest_ms.load(), " ms; ",
            denied.load(), " answered 503");
    CHECK(remaining(last) >= 0);
    CHECK(held <= told + 4);  // only calls in flight at the kill (one per client) count unanswered

    // A fresh identifier is limited exactly again, through both gateways.
    CHECK(admitted(gws, "10.3.0.2", 12) == 5);
}

TEST_CASE("redis sentinel: a manual failover (the primary demoted, not dead) is followed") {
    sentinel_setup s;
    auto up = start_upstream();
    std::vector<std::unique_ptr<gateway>> gws;
    for (int i = 0; i < 2; ++i) gws.push_back(start_gateway(gateway_yaml(up->port, {}, sentinel_yaml(s))));
    for (auto& g : gws) REQUIRE(eventually([&] { return ready(*g); }));
    CHECK(admitted(gws, "10.4.0.1", 12) == 5);

    const auto asked = steady_clock::now();
    process failover({"redis-cli", "-p", std::to_string(s.sentinel_ports[0]), "SENTINEL", "FAILOVER", s.master});
    REQUIRE(failover.wait_exit(10s) == 0);
    INFO("redis-cli: ", failover.output());
    REQUIRE(failover.output().find("OK") != std::string::npos);
    // Every worker (two per gateway) moves to the new primary when the sentinels announce
    // +switch-master (the demoted one drops its clients, or answers READONLY, only when the
    // sentinels reconfigure it, seconds later).
    const std::string moved = "names 127.0.0.1:" + std::to_string(s.replica_port) + " as the primary";
    for (auto& g : gws) {
        INFO("gateway output:\n", g->proc->output());
        REQUIRE(eventually([&] { return count_of(g->proc->output(), moved) >= 2; }, seconds(20)));
        CHECK(g->proc->output().find("sentinels switched the primary of " + s.master) != std::string::npos);
        REQUIRE(eventually([&] { return ready(*g); }, seconds(5)));
    }
    MESSAGE("manual failover followed ", duration_cast<milliseconds>(steady_clock::now() - asked).count(),
            " ms after SENTINEL FAILOVER");
    CHECK(admitted(gws, "10.4.0.2", 12) == 5);
}
