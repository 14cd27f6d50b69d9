// Gateways on a real Redis Cluster (redis-server --cluster-enabled yes, made with
// redis-cli --cluster create): exact across primaries, denials charge nothing anywhere,
// through a resharding and a primary's failover.
#include "cluster_support.hpp"
#include "e2e.hpp"
#include "identity/hasher.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <latch>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>

using namespace sluice::test;
using namespace std::chrono;

namespace {

std::string cluster_yaml(std::uint16_t seed, const std::string& timeout, const std::string& policies,
                         const std::string& redis_extra = "") {
    return "store:\n  type: redis-cluster\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(seed) +
           "\"], timeout: " + timeout + redis_extra + " }\nclients:\n  trusted_proxies: [\"127.0.0.1/32\"]\n" +
           "  user: { api_key_header: X-API-Key }\n" + policies +
           "routes:\n  - { match: { path_prefix: / }, policy: p }\n";
}

struct fleet {
    fleet(std::size_t n, const std::string& yaml) {
        up = start_upstream();
        for (std::size_t i = 0; i < n; ++i)
            gateways.push_back(
                start_gateway(gateway_yaml(up->port, {}, yaml), {}, {{"SLUICE_HASH_SECRET", "cluster-secret"}}));
        for (auto& g : gateways)
            REQUIRE(eventually([&] { return fetch(g->admin_port, "GET", "/readyz").status == 200; }, seconds(20)));
    }
    double metric_sum(const std::string& sample) const {
        double sum = 0;
        for (auto& g : gateways) sum += metric_value(fetch(g->admin_port, "GET", "/metrics").body, sample);
        return sum;
    }
    std::unique_ptr<upstream_server> up;
    std::vector<std::unique_ptr<gateway>> gateways;
};

std::string client_ip(int i) { return "10." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ".7"; }

}  // namespace

TEST_CASE("cluster: three gateways admit exactly the limit for identifiers on every primary") {
    cluster_nodes c(3, 1);
    fleet f(3, cluster_yaml(c.ports[0], "2s", "policies:\n  p:\n    ip: [ {limit: 10, per: 1h, precision: 6m} ]\n"));
    constexpr int identities = 30, tries = 14;
    std::map<int, int> admitted;
    std::mutex mu;
    std::atomic<int> errors{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 6; ++t)
        clients.emplace_back([&, t] {
            for (int id = t; id < identities; id += 6)
                for (int i = 0; i < tries; ++i) {
                    auto r = fetch(f.gateways[(id + i) % 3]->port, "GET", "/", {{"X-Forwarded-For", client_ip(id)}});
                    std::lock_guard lock(mu);
                    if (r.status == 200)
                        ++admitted[id];
                    else if (r.status != 429)
                        ++errors;
                }
        });
    for (auto& t : clients) t.join();
    CHECK(errors == 0);
    for (int id = 0; id < identities; ++id) {
        CAPTURE(id);
        CHECK(admitted[id] == 10);
    }
    // The identifiers are spread over every primary.
    for (auto port : c.primary_ports()) {
        CAPTURE(port);
        CHECK_FALSE(c.keys(port, "sluice:{ip:*").empty());
    }
}

TEST_CASE("cluster: one identifier's checks asked together share an EVALSHA, and stay exact") {
    cluster_nodes c(3, 0);
    fleet f(1, cluster_yaml(c.ports[0], "2s", "policies:\n  p:\n    ip: [ {limit: 50, per: 1h} ]\n"));
    constexpr int identities = 4, per_identity = 8, each = 10;
    std::array<std::atomic<int>, identities> admitted{};
    std::atomic<int> refused{0}, errors{0};
    std::latch go(identities * per_identity + 1);
    std::vector<std::thread> threads;
    for (int client = 0; client < identities * per_identity; ++client)
        threads.emplace_back([&, client] {
            try {
                connection conn("127.0.0.1", f.gateways[0]->port);
                go.arrive_and_wait();  // every client sends its first request at once
                for (int i = 0; i < each; ++i) {
                    conn.send(make_request("GET", "/together", {{"X-Forwarded-For", client_ip(client % identities)}}));
                    const auto status = conn.read_response().status;
                    (status == 200   ? admitted[static_cast<std::size_t>(client % identities)]
                     : status == 429 ? refused
                                     : errors)++;
                }
            } catch (const std::exception&) {
                ++errors;
            }
        });
    go.arrive_and_wait();
    for (auto& t : threads) t.join();
    CHECK(errors == 0);
    for (int id = 0; id < identities; ++id) {
        CAPTURE(id);
        CHECK(admitted[static_cast<std::size_t>(id)] == 50);
    }
    CHECK(refused == identities * (per_identity * each - 50));
    // Checks of one slot went several to an EVALSHA: more checks than commands written, though
    // the handshakes and slot map reads count as commands.
    const double checks = f.metric_sum("sluice_redis_checks_total"),
                 commands = f.metric_sum("sluice_redis_commands_total");
    MESSAGE(checks, " checks in ", commands, " commands");
    CHECK(checks > commands);
    CHECK(f.metric_sum("sluice_redis_errors_total") == 0);
}

TEST_CASE("cluster: over TLS, identifiers on every primary are admitted exactly the limit") {
    tls_files certs;
    cluster_nodes c(3, 0, &certs);
    fleet f(1, cluster_yaml(c.ports[0], "2s", "policies:\n  p:\n    ip: [ {limit: 5, per: 1h, precision: 6m} ]\n",
                            ", tls: { ca_file: \"" + certs.file("ca.pem") + "\" }"));
    for (int id = 0; id < 12; ++id) {
        CAPTURE(id);
        int admitted = 0;
        for (int i = 0; i < 7; ++i)
            admitted += fetch(f.gateways[0]->port, "GET", "/", {{"X-Forwarded-For", client_ip(id)}}).status == 200;
        CHECK(admitted == 5);
    }
    for (auto port : c.primary_ports()) {
        CAPTURE(port);
        CHECK_FALSE(c.keys(port, "sluice:{ip:*").empty());
    }
}

TEST_CASE("cluster: ip and user on different primaries stay exact, and a denial charges nothing anywhere") {
    cluster_nodes c(3, 0);
    fleet f(2, cluster_yaml(c.ports[0], "2s",
                            "policies:\n  p:\n    ip: [ {limit: 5, per: 1h, precision: 6m} ]\n"
                            "    user: [ {limit: 3, per: 1h, precision: 6m} ]\n"));
    // One client address, ten users: the address' limit admits five, the other five are
    // denied by it, after their user keys (on any primary) admitted them.
    for (int u = 0; u < 10; ++u) {
        auto r = fetch(f.gateways[u % 2]->port, "GET", "/",
                       {{"X-Forwarded-For", "192.0.2.1"}, {"X-API-Key", "user-" + std::to_string(u)}});
        CHECK(r.status == (u < 5 ? 200 : 429));
    }
    // One user from six addresses: the user's limit admits three.
    for (int i = 0; i < 6; ++i) {
        auto r = fetch(f.gateways[i % 2]->port, "GET", "/",
                       {{"X-Forwarded-For", "198.51.100." + std::to_string(i + 1)}, {"X-API-Key", "heavy"}});
        CHECK(r.status == (i < 3 ? 200 : 429));
    }

    // What the cluster holds: every admitted request counted once, every denied one nowhere.
    std::map<std::string, long> counts;  // key -> stored count
    std::map<std::string, std::uint16_t> where;
    for (const auto& k : c.stored("sluice:*")) {
        counts[k.key] = k.count;
        where[k.key] = k.port;
    }
    std::map<long, int> ip_counts, user_counts;  // count -> how many keys hold it
    std::set<std::uint16_t> user_nodes, ip_nodes;
    for (const auto& [k, n] : counts) {
        CAPTURE(k);
        CHECK(n >= 0);
        if (k.find("{user:") != std::string::npos) {
            ++user_counts[n];
            user_nodes.insert(where[k]);
        } else {
            ++ip_counts[n];
            ip_nodes.insert(where[k]);
        }
    }
    // Users: five admitted once, five denied (nothing), "heavy" three.
    CHECK(user_counts[1] == 5);
    CHECK(user_counts[0] == 5);
    CHECK(user_counts[3] == 1);
    // Addresses: 192.0.2.1 five, three of heavy's once, three denied (nothing).
    CHECK(ip_counts[5] == 1);
    CHECK(ip_counts[1] == 3);
    CHECK(ip_counts[0] == 3);
    for (const auto& [n, keys] : ip_counts) CHECK((n == 0 || n == 1 || n == 5));
    for (const auto& [n, keys] : user_counts) CHECK((n == 0 || n == 1 || n == 3));
    // The requests really were split over primaries.
    std::set<std::uint16_t> all = user_nodes;
    all.insert(ip_nodes.begin(), ip_nodes.end());
    CHECK(all.size() >= 2);
    CHECK(f.metric_sum("sluice_redis_undos_total") == 8);
}

TEST_CASE("cluster: header, route and composite kinds on every primary stay exact, and a denial by any charges none") {
    cluster_nodes c(3, 0);
    fleet f(2, cluster_yaml(c.ports[0], "2s",
                            "policies:\n  p:\n    ip: [ {limit: 4, per: 1h, precision: 6m} ]\n"
                            "    header:X-Tenant: [ {limit: 3, per: 1h, precision: 6m} ]\n"
                            "    route: [ {limit: 7, per: 1h, precision: 6m} ]\n"
                            "    header:X-Tenant+ip: [ {limit: 2, per: 1h, precision: 6m} ]\n"));
    // (tenant, address, status): refusals by the composite, the tenant, the address and the
    // route, each after other kinds (on other primaries) admitted the request.
    const std::vector<std::tuple<std::string, std::string, int>> requests{
        {"acme", "192.0.2.1", 200},    {"acme", "192.0.2.1", 200},   {"acme", "192.0.2.1", 429},
        {"acme", "192.0.2.2", 200},    {"acme", "192.0.2.3", 429},   {"globex", "192.0.2.1", 200},
        {"globex", "192.0.2.1", 200},  {"globex", "192.0.2.2", 200}, {"initech", "192.0.2.1", 429},
        {"initech", "192.0.2.4", 200}, {"initech", "192.0.2.5", 429}};
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const auto& [tenant, address, status] = requests[i];
        CAPTURE(i);
        const auto r = fetch(f.gateways[i % 2]->port, "GET", "/", {{"X-Forwarded-For", address}, {"X-Tenant", tenant}});
        CHECK(r.status == status);
    }
    // Every kind holds the seven admissions and nothing of the four refusals.
    std::map<std::string, long> sum, most;
    std::set<std::uint16_t> nodes;
    for (const auto& k : c.stored("sluice:*")) {
        CAPTURE(k.key);
        const std::string kind = k.key.find("{header:x-tenant+ip:") != std::string::npos ? "composite"
                                 : k.key.find("{header:x-tenant:") != std::string::npos  ? "tenant"
                                 : k.key.find("{route:") != std::string::npos            ? "route"
                                 : k.key.find("{ip:") != std::string::npos               ? "ip"
                                                                                         : "other";
        sum[kind] += k.count;
        most[kind] = std::max(most[kind], k.count);
        if (k.count > 0) nodes.insert(k.port);
    }
    CHECK(sum["ip"] == 7);
    CHECK(most["ip"] == 4);
    CHECK(sum["tenant"] == 7);
    CHECK(most["tenant"] == 3);
    CHECK(sum["composite"] == 7);
    CHECK(most["composite"] == 2);
    CHECK(sum["route"] == 7);
    CHECK(sum["other"] == 0);
    CHECK(nodes.size() >= 2);  // split over primaries
}

TEST_CASE("cluster: count_rejected counts a refusal on every primary and undoes nothing") {
    cluster_nodes c(3, 0);
    fleet f(2, cluster_yaml(c.ports[0], "2s",
                            "policies:\n  p:\n    count_rejected: true\n"
                            "    ip: [ {limit: 5, per: 1h, precision: 6m} ]\n"
                            "    user: [ {limit: 3, per: 1h, precision: 6m} ]\n"));
    // One address, eight users: the address admits five and refuses three, each refusal
    // counted on the address and on its user (wherever each lives).
    for (int u = 0; u < 8; ++u) {
        auto r = fetch(f.gateways[u % 2]->port, "GET", "/",
                       {{"X-Forwarded-For", "192.0.2.1"}, {"X-API-Key", "user-" + std::to_string(u)}});
        CHECK(r.status == (u < 5 ? 200 : 429));
    }
    // One user from five addresses: three admitted, two refused and counted.
    for (int i = 0; i < 5; ++i) {
        auto r = fetch(f.gateways[i % 2]->port, "GET", "/",
                       {{"X-Forwarded-For", "198.51.100." + std::to_string(i + 1)}, {"X-API-Key", "heavy"}});
        CHECK(r.status == (i < 3 ? 200 : 429));
    }
    std::map<long, int> ip_counts, user_counts;  // count -> how many keys hold it
    std::set<std::uint16_t> nodes;
    for (const auto& k : c.stored("sluice:*")) {
        (k.key.find("{user:") != std::string::npos ? user_counts : ip_counts)[k.count]++;
        nodes.insert(k.port);
    }
    CHECK(ip_counts[8] == 1);  // 192.0.2.1: five admitted, three refused, all counted
    CHECK(ip_counts[1] == 5);  // heavy's addresses, the two refused ones included
    CHECK(user_counts[1] == 8);
    CHECK(user_counts[5] == 1);  // heavy
    CHECK(ip_counts.size() == 2);
    CHECK(user_counts.size() == 2);
    CHECK(nodes.size() >= 2);
    CHECK(f.metric_sum("sluice_redis_undos_total") == 0);
}

TEST_CASE("cluster: concurrent split requests never over-admit, and a denial leaves nothing behind") {
    cluster_nodes c(3, 0);
    fleet f(2, cluster_yaml(c.ports[0], "2s",
                            "policies:\n  p:\n    ip: [ {limit: 20, per: 1h, precision: 6m} ]\n"
                            "    user: [ {limit: 20, per: 1h, precision: 6m} ]\n"));
    // Four addresses and four users, every request a random pair of them: identifiers are
    // admitted on one node and denied on another while the same identifiers are in flight.
    std::map<std::pair<char, int>, int> admitted;  // ('i' | 'u', which) -> admissions the clients saw
    int total = 0, denied = 0;
    std::mutex mu;
    std::vector<std::thread> clients;
    for (int t = 0; t < 8; ++t)
        clients.emplace_back([&, t] {
            std::mt19937 rng(static_cast<unsigned>(t));
            for (int i = 0; i < 30; ++i) {
                const int ip = static_cast<int>(rng() % 4), user = static_cast<int>(rng() % 4);
                auto r = fetch(
                    f.gateways[(t + i) % 2]->port, "GET", "/",
                    {{"X-Forwarded-For", client_ip(ip)}, {"X-API-Key", std::string(1, static_cast<char>('a' + user))}});
                std::lock_guard lock(mu);
                if (r.status == 200) {
                    ++total;
                    ++admitted[{'i', ip}];
                    ++admitted[{'u', user}];
                } else {
                    CHECK(r.status == 429);
                    ++denied;
                }
            }
        });
    for (auto& t : clients) t.join();
    for (const auto& [id, n] : admitted) {
        CAPTURE(id.first);
        CAPTURE(id.second);
        CHECK(n <= 20);  // never over the limit
    }
    // Each kind's stored counts hold every admission and nothing else: a denial's commits on
    // other nodes are taken back exactly, whatever was admitted there in between.
    long ip_stored = 0, user_stored = 0;
    for (const auto& k : c.stored("sluice:*")) {
        CHECK(k.count <= 20);
        (k.key.find("{user:") != std::string::npos ? user_stored : ip_stored) += k.count;
    }
    MESSAGE("admitted " << total << ", denied " << denied << ", left behind: " << ip_stored - total << " on addresses, "
                        << user_stored - total << " on users");
    CHECK(ip_stored == total);
    CHECK(user_stored == total);
    CHECK(denied > 0);
    CHECK(f.metric_sum("sluice_redis_undos_total") > 0);
}

TEST_CASE(
    "cluster: addresses whose requests a key on another node refuses, three at a time, keep exactly what "
    "remains") {
    // The scenario of issue 25: each address sends 30 requests with its own API key, three at a
    // time, the key on another primary than the address. The key admits 15; each refusal by it
    // comes after the address admitted, while the address admits the address' other requests:
    // its commit must be taken back exactly, or the address keeps charges of refused requests.
    // Then 9 requests with a fresh key: exactly the 5 the address has left are admitted.
    cluster_nodes c(3, 0);
    fleet f(2, cluster_yaml(c.ports[0], "2s",
                            "policies:\n  p:\n    ip: [ {limit: 20, per: 1h, algorithm: log} ]\n"
                            "    user: [ {limit: 15, per: 1h, algorithm: log} ]\n"));
    const sluice::identity::hasher hash("cluster-secret");  // the fleet's SLUICE_HASH_SECRET
    const auto key_of = [&](const char* kind, const std::string& id) {
        return std::string("sluice:{") + kind + ":" + sluice::identity::hasher::to_hex(hash.hash(kind, id)) + "}";
    };
    constexpr int addresses = 12, each = 30, at_once = 3, then = 9;
    std::vector<std::string> api_key(addresses), fresh_key(addresses);
    std::vector<std::uint16_t> address_node(addresses);
    for (int a = 0; a < addresses; ++a) {
        address_node[a] = c.node_of(key_of("ip", client_ip(a)));
        // A key another primary serves. (Strings appended: GCC 12's false -Wrestrict on "k" + string.)
        for (int j = 0; api_key[a].empty(); ++j) {
            std::string k = "k";
            k.append(std::to_string(a)).append("-").append(std::to_string(j));
            if (c.node_of(key_of("user", std::string("key:").append(k))) != address_node[a]) api_key[a] = k;
        }
        fresh_key[a] = std::string("fresh-").append(std::to_string(a));
    }

    std::vector<std::atomic<int>> admitted(addresses), refused(addresses);
    std::atomic<int> errors{0};
    const auto send = [&](int a, const std::string& key, int g) {
        auto r = fetch(f.gateways[static_cast<std::size_t>(g) % 2]->port, "GET", "/",
                       {{"X-Forwarded-For", client_ip(a)}, {"X-API-Key", key}});
        if (r.status == 200)
            ++admitted[a];
        else if (r.status == 429)
            ++refused[a];
        else
            ++errors;
    };
    std::vector<std::thread> clients;
    for (int a = 0; a < addresses; ++a)
        for (int t = 0; t < at_once; ++t)
            clients.emplace_back([&, a, t] {
                for (int i = 0; i < each / at_once; ++i) send(a, api_key[a], t + i);
            });
    for (auto& t : clients) t.join();
    CHECK(errors == 0);
    for (int a = 0; a < addresses; ++a) {
        CAPTURE(a);
        const int got = admitted[a], not_got = refused[a];
        CHECK(got == 15);  // the key's limit
        CHECK(not_got == each - 15);
    }
    // The identifiers are where this test placed them, and hold exactly what was admitted.
    for (int a = 0; a < addresses; ++a) {
        CAPTURE(a);
        const auto ip = key_of("ip", client_ip(a)), user = key_of("user", std::string("key:").append(api_key[a]));
        REQUIRE(c.keys(address_node[a], ip) == std::vector<std::string>{ip});
        CHECK(c.node_of(user) != address_node[a]);
        const auto log_of = [&](const std::string& k) {
            const auto logs = c.keys(c.node_of(k), k + ":log:*");
            REQUIRE(logs.size() == 1);
            return std::stol(c.cli(c.node_of(k), {"ZCARD", logs[0]}));
        };
        CHECK(log_of(ip) == 15);
        CHECK(log_of(user) == 15);
    }
    const double undos = f.metric_sum("sluice_redis_undos_total");
    CHECK(undos > 0);

    // Zero left behind: with a fresh key, each address is admitted exactly what remains.
    std::vector<std::thread> more;
    for (int a = 0; a < addresses; ++a) {
        admitted[a] = 0;
        refused[a] = 0;
        more.emplace_back([&, a] {
            for (int i = 0; i < then; ++i) send(a, fresh_key[a], i);
        });
    }
    for (auto& t : more) t.join();
    CHECK(errors == 0);
    for (int a = 0; a < addresses; ++a) {
        CAPTURE(a);
        const int got = admitted[a], not_got = refused[a];
        CHECK(got == 20 - 15);
        CHECK(not_got == then - 5);
    }
    MESSAGE("commits taken back across nodes: " << undos);
}

TEST_CASE("cluster: a resharding while gateways run keeps every identifier exact") {
    cluster_nodes c(3, 0);
    // A limit no client reaches: every request goes to the cluster (no deny cache), and each
    // admission must be counted exactly once wherever its slot is then.
    fleet f(2,
            cluster_yaml(c.ports[0], "2s", "policies:\n  p:\n    ip: [ {limit: 1000000, per: 1h, precision: 6m} ]\n"));
    constexpr int identities = 40;
    std::map<int, long> admitted;
    std::mutex mu;
    std::atomic<bool> resharded{false};
    std::atomic<int> errors{0};

    // Slots move from the first primary to the second while clients send.
    auto primaries = c.primary_ports();
    REQUIRE(primaries.size() == 3);
    const auto from = *primaries.begin(), to = *std::next(primaries.begin());
    std::thread reshard([&] {
        run({"redis-cli", "--cluster", "reshard", "127.0.0.1:" + std::to_string(from), "--cluster-from",
             c.node_id(from), "--cluster-to", c.node_id(to), "--cluster-slots", "3000", "--cluster-yes"},
            seconds(120));
        resharded = true;
    });
    std::vector<std::thread> clients;
    for (int t = 0; t < 4; ++t)
        clients.emplace_back([&, t] {
            // Until the resharding is over, then one more round: bounded by count.
            for (int round = 0; round < 5000; ++round) {
                const bool last = resharded.load();
                for (int id = t; id < identities; id += 4) {
                    auto r =
                        fetch(f.gateways[(id + round) % 2]->port, "GET", "/", {{"X-Forwarded-For", client_ip(id)}});
                    std::lock_guard lock(mu);
                    if (r.status == 200)
                        ++admitted[id];
                    else
                        ++errors;
                }
                if (last) break;
            }
        });
    for (auto& t : clients) t.join();
    reshard.join();
    REQUIRE(resharded);
    MESSAGE("answered 503 (store unreachable) during the resharding: " << errors.load());

    // Each identifier's count, wherever its slot now is, is what was admitted.
    const auto stored = c.stored("sluice:{ip:*");
    std::multiset<long> want, got;
    for (auto& [id, n] : admitted) want.insert(n);
    for (const auto& k : stored) got.insert(k.count);
    CHECK(stored.size() == static_cast<std::size_t>(identities));
    CHECK(got == want);
    CHECK(f.metric_sum("sluice_redis_redirects_total") > 0);
}

TEST_CASE("cluster: a primary killed under load fails over, and no request waits past the timeout") {
    cluster_nodes c(3, 1);
    fleet f(
        2, cluster_yaml(c.ports[0], "300ms", "policies:\n  p:\n    ip: [ {limit: 100000, per: 1h, precision: 6m} ]\n"));
    constexpr int identities = 24;
    std::map<int, long> admitted;
    std::vector<steady_clock::time_point> admitted_at;
    std::mutex mu;
    std::atomic<bool> stop{false};
    std::atomic<long> slowest_ms{0}, failed{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 4; ++t)
        clients.emplace_back([&, t] {
            for (int round = 0; round < 100000 && !stop; ++round)
                for (int id = t; id < identities && !stop; id += 4) {
                    const auto start = steady_clock::now();
                    auto r =
                        fetch(f.gateways[(id + round) % 2]->port, "GET", "/", {{"X-Forwarded-For", client_ip(id)}});
                    const long ms = duration_cast<milliseconds>(steady_clock::now() - start).count();
                    long seen = slowest_ms.load();
                    while (ms > seen && !slowest_ms.compare_exchange_weak(seen, ms)) {
                    }
                    std::lock_guard lock(mu);
                    if (r.status == 200) {
                        ++admitted[id];
                        admitted_at.push_back(steady_clock::now());
                    } else {
                        ++failed;
                    }
                }
        });
    auto admitted_now = [&] {
        std::lock_guard lock(mu);
        long n = 0;
        for (auto& [id, k] : admitted) n += k;
        return n;
    };
    // Load flows, then the first primary dies.
    REQUIRE(eventually([&] { return admitted_now() > 500; }));
    const auto victim = *c.primary_ports().begin();
    std::size_t victim_index = 0;
    while (c.ports[victim_index] != victim) ++victim_index;
    c.procs[victim_index]->signal(SIGKILL);
    c.procs[victim_index]->wait_exit(seconds(5));
    const auto killed_at = steady_clock::now();
    // Its replica is promoted (the cluster notices after cluster-node-timeout)...
    REQUIRE(eventually([&] { return c.primary_ports().size() == 3; }, seconds(30)));

    // ...and every gateway is ready again by itself.
    for (auto& g : f.gateways)
        REQUIRE(eventually([&] { return fetch(g->admin_port, "GET", "/readyz").status == 200; }, seconds(30)));
    const auto recovered_ms = duration_cast<milliseconds>(steady_clock::now() - killed_at).count();
    // Load continues a little on the new primary, then stops.
    const long at_recovery = admitted_now();
    REQUIRE(eventually([&] { return admitted_now() > at_recovery + 300; }));
    stop = true;
    for (auto& t : clients) t.join();

    // What the cluster remembers against what was admitted: a promoted replica misses the
    // writes not yet replicated when its primary died.
    long total_admitted = 0, total_stored = 0;
    for (auto& [id, n] : admitted) total_admitted += n;
    for (const auto& k : c.stored("sluice:{ip:*")) total_stored += k.count;
    MESSAGE("failover: gateways ready again "
            << recovered_ms << " ms after the kill; " << failed.load()
            << " requests answered 503 meanwhile; slowest request " << slowest_ms.load() << " ms; " << total_admitted
            << " admitted, " << total_stored << " remembered: " << total_admitted - total_stored << " forgotten");
    // Replication is asynchronous: what is lost is at most what the replica had not yet
    // received, far less than the last second's admissions unless it lagged that far.
    long last_second = 0;
    for (auto t : admitted_at) last_second += t <= killed_at && t > killed_at - seconds(1);
    MESSAGE("admissions in the second before the kill: " << last_second);
    // A call in flight at the kill may have run (and replicated) though its answer was lost:
    // counted, answered 503.
    CHECK(total_stored <= total_admitted + failed.load());
    CHECK(total_admitted - total_stored <= last_second);
    CHECK(slowest_ms.load() < 300 + 1500);  // the store timeout, and slack for a loaded machine
    CHECK(failed.load() > 0);               // the dead primary's identifiers were refused meanwhile (on_error deny)
}

TEST_CASE("cluster: concurrency slots are exact across primaries, and a refusal gives back the slots it took") {
    cluster_nodes c(3, 0);
    fleet f(2, cluster_yaml(c.ports[0], "2s",
                            "policies:\n  p:\n    ip: [ {concurrency: 2, lease: 3s} ]\n"
                            "    user: [ {concurrency: 1, lease: 3s} ]\n"));
    const auto as = [](const std::string& user) {
        return header_list{{"X-Forwarded-For", "192.0.2.1"}, {"X-API-Key", user}};
    };
    auto stats = [&] { return json_of(fetch(f.up->port, "GET", "/stats")).at("held").as_int64(); };
    connection first("127.0.0.1", f.gateways[0]->port);
    first.send(make_request("GET", "/hold?name=first", as("user-a")));
    REQUIRE(eventually([&] { return stats() == 1; }));
    // user-a is at its one slot: each refusal, decided on the user's node, gives back the
    // address' slot its node had given (wherever the two identifiers live).
    for (int i = 0; i < 6; ++i) CHECK(fetch(f.gateways[i % 2]->port, "GET", "/echo", as("user-a")).status == 429);
    connection second("127.0.0.1", f.gateways[1]->port);
    second.send(make_request("GET", "/hold?name=second", as("user-b")));
    REQUIRE(eventually([&] { return stats() == 2; }));
    // The address is at its two slots, whichever gateway or user asks.
    for (int i = 0; i < 4; ++i) {
        auto r = fetch(f.gateways[i % 2]->port, "GET", "/echo", as("user-" + std::to_string(i + 3)));
        CHECK(r.status == 429);
        CHECK_FALSE(r.has_header("Retry-After"));
    }
    REQUIRE(fetch(f.up->port, "GET", "/let-go?name=first").body == "1");
    CHECK(first.read_response().status == 200);
    REQUIRE(eventually([&] { return fetch(f.gateways[0]->port, "GET", "/echo", as("user-c")).status == 200; }));
    REQUIRE(fetch(f.up->port, "GET", "/let-go?name=second").body == "1");
    CHECK(second.read_response().status == 200);
}

// Right after start, a gateway decides every request: its proxy port opens once the slot
// map is read and every primary's connection is ready (it took the store-error path for 8 of
// its first 20 requests when it listened before).
TEST_CASE("cluster: a gateway's first requests right after start are decided, none by on_error") {
    cluster_nodes c(3, 0);
    auto up = start_upstream();
    auto gw = start_gateway(
        gateway_yaml(up->port, {},
                     cluster_yaml(c.ports[0], "2s", "policies:\n  p:\n    ip: [ {limit: 15, per: 1h} ]\n")),
        {}, {{"SLUICE_HASH_SECRET", "cluster-secret"}});
    int admitted = 0, refused = 0, other = 0;
    for (int i = 0; i < 20; ++i) {
        const auto status = fetch(gw->port, "GET", "/", {{"X-Forwarded-For", client_ip(i % 2)}}).status;
        (status == 200 ? admitted : status == 429 ? refused : other)++;
    }
    CHECK(other == 0);  // on_error deny: a 503 is a request the store could not decide
    CHECK(admitted == 20);
    CHECK(refused == 0);
    CHECK(fetch(gw->admin_port, "GET", "/readyz").status == 200);
}
