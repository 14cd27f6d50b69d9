// Upstream pools through the real binary, in front of real test upstreams started with
// --name (each answer's X-Upstream-Name tells which server it came from): round robin
// weights, hash stickiness and what moves when a server goes, a server killed under load
// (no idempotent request lost, no request run twice), passive ejection and its doubling,
// retries and the retry budget, a pool with no server left, routes to pools, and DNS names
// re-resolved (a gateway in a mount namespace of its own with an /etc/hosts the test writes).
#include "e2e.hpp"

#include <csignal>

#include <atomic>
#include <map>
#include <optional>
#include <set>

using namespace sluice::test;

namespace {

using steady = std::chrono::steady_clock;

// A gateway config with nothing but `rest` beside the listeners and the log level.
std::string pool_config(const std::string& rest, int threads = 1) {
    return "server: { listen: \"127.0.0.1:0\", threads: " + std::to_string(threads) +
           " }\nadmin: { listen: \"127.0.0.1:0\" }\nlog: { level: info }\n" + rest;
}

std::string url_of(std::uint16_t port) { return "\"http://127.0.0.1:" + std::to_string(port) + "\""; }

// `servers: [...]` of the given ports, with weights when given.
std::string servers_yaml(const std::vector<std::uint16_t>& ports, const std::vector<int>& weights = {}) {
    std::string out = "servers: [";
    for (std::size_t i = 0; i < ports.size(); ++i) {
        if (i > 0) out += ", ";
        out += "{ url: " + url_of(ports[i]);
        if (!weights.empty()) out += ", weight: " + std::to_string(weights[i]);
        out += " }";
    }
    return out + "]";
}

std::unique_ptr<upstream_server> named(const std::string& name) { return start_upstream({"--name", name}); }

std::uint64_t stat(std::uint16_t upstream_port, const std::string& key) {
    return json_of(fetch(upstream_port, "GET", "/stats")).at(key).to_number<std::uint64_t>();
}

void control(std::uint16_t upstream_port, const std::string& query) {
    REQUIRE(fetch(upstream_port, "GET", "/control?" + query).status == 200);
}

// A port nothing listens on: a test upstream started and killed (SIGKILL, reaped).
std::uint16_t dead_port() {
    auto up = start_upstream();
    const auto port = up->port;
    up->proc.signal(SIGKILL);
    REQUIRE(up->proc.wait_exit(10s).has_value());
    return port;
}

void kill_upstream(upstream_server& up) {
    up.proc.signal(SIGKILL);
    REQUIRE(up.proc.wait_exit(10s).has_value());
}

// Requests on one keep-alive connection to the gateway, a new one when it closes it.
class client {
public:
    explicit client(std::uint16_t port) : port_(port) {}
    response send(const std::string& method, const std::string& target, header_list headers = {},
                  std::string body = "") {
        if (!c_) c_.emplace("127.0.0.1", port_);
        c_->send(make_request(method, target, std::move(headers), std::move(body)));
        auto r = c_->read_response();
        if (r.header("Connection") == "close") c_.reset();
        return r;
    }
    response get(const std::string& target, header_list headers = {}) { return send("GET", target, headers); }

private:
    std::uint16_t port_;
    std::optional<connection> c_;
};

struct tally {
    std::map<std::string, int> names;  // X-Upstream-Name of the answers ("" when none)
    std::map<int, int> statuses;
    std::string error;  // why a client stopped early
    void add(const response& r) {
        ++names[r.header("X-Upstream-Name")];
        ++statuses[r.status];
    }
};

// `clients` threads, each sending `per_client` GETs of `target` on a keep-alive connection;
// `done` counts the answers so far. Every request is bounded by the client's timeouts.
class load {
public:
    load(std::uint16_t port, int clients, int per_client, std::string target) : tallies_(clients) {
        for (int t = 0; t < clients; ++t)
            threads_.emplace_back([this, port, per_client, target, t] {
                auto& mine = tallies_[static_cast<std::size_t>(t)];
                try {
                    client c(port);
                    for (int i = 0; i < per_client; ++i) {
                        mine.add(c.get(target));
                        ++done;
                    }
                } catch (const std::exception& e) {
                    mine.error = e.what();
                }
            });
    }
    ~load() { join(); }
    load(const load&) = delete;
    load& operator=(const load&) = delete;

    tally join() {
        for (auto& t : threads_)
            if (t.joinable()) t.join();
        tally all;
        for (const auto& m : tallies_) {
            for (const auto& [k, v] : m.names) all.names[k] += v;
            for (const auto& [k, v] : m.statuses) all.statuses[k] += v;
            if (!m.error.empty()) all.error = m.error;
        }
        return all;
    }
    std::atomic<int> done{0};

private:
    std::vector<tally> tallies_;
    std::vector<std::thread> threads_;
};

std::size_t count_of(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// Polls `done()` every 2 ms (not a busy loop: the gateway shares the cores) for up to `limit`.
template <class Pred>
bool poll_until(Pred&& done, std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    while (!done()) {
        if (steady::now() > deadline) return false;
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

double ms_between(steady::time_point a, steady::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

TEST_CASE("pools: round robin shares follow the weights over 10000 requests") {
    auto a = named("a"), b = named("b"), c = named("c");
    auto gw = start_gateway(pool_config("upstream: { " + servers_yaml({a->port, b->port, c->port}, {5, 3, 2}) +
                                        ", balance: round_robin }\n"));
    load l(gw->port, 4, 2500, "/status?code=200");
    const auto t = l.join();
    REQUIRE(t.error.empty());
    CHECK(t.statuses.at(200) == 10000);
    // Smooth weighted round robin is exact on one worker: each share within 5% of its
    // expected value (relative: 5000 +- 250, 3000 +- 150, 2000 +- 100).
    const std::map<std::string, int> expected{{"a", 5000}, {"b", 3000}, {"c", 2000}};
    for (const auto& [name, want] : expected) {
        const int got = t.names.count(name) ? t.names.at(name) : 0;
        INFO(name << ": " << got << " of 10000, expected " << want);
        CHECK(std::abs(got - want) <= want / 20);
    }
    MESSAGE("round robin 5/3/2 over 10000: a " << t.names.at("a") << ", b " << t.names.at("b") << ", c "
                                               << t.names.at("c"));
}

TEST_CASE("pools: hash keeps each caller on one server and a server that goes moves only its own callers") {
    std::vector<std::unique_ptr<upstream_server>> ups;
    std::vector<std::uint16_t> ports;
    for (const char* n : {"s0", "s1", "s2", "s3"}) {
        ups.push_back(named(n));
        ports.push_back(ups.back()->port);
    }
    // Callers named by an API key (a user: on a limited route) and by their address, given
    // in X-Forwarded-For by a trusted proxy (the test itself).
    auto gw = start_gateway(pool_config("upstream: { " + servers_yaml(ports) + R"(, balance: hash }
clients:
  trusted_proxies: ["127.0.0.1/32"]
  user: { api_key_header: X-API-Key }
policies:
  roomy:
    ip: [ {limit: 1000000, per: 1h} ]
    user: [ {limit: 1000000, per: 1h} ]
routes:
  - { match: { path_prefix: / }, policy: roomy }
)"));
    std::vector<header_list> callers;
    for (int i = 0; i < 100; ++i) callers.push_back({{"X-API-Key", "key-" + std::to_string(i)}});
    for (int i = 0; i < 100; ++i)
        callers.push_back({{"X-Forwarded-For", "10.1." + std::to_string(i / 50) + "." + std::to_string(i % 50 + 1)}});

    client c(gw->port);
    // Each caller's server, the same for all its requests.
    auto servers_of = [&](int times) {
        std::vector<std::string> out;
        for (const auto& h : callers) {
            std::set<std::string> seen;
            for (int k = 0; k < times; ++k) {
                auto r = c.get("/status?code=200", h);
                REQUIRE(r.status == 200);
                seen.insert(r.header("X-Upstream-Name"));
            }
            INFO("caller " << h[0].first << ": " << h[0].second);
            CHECK(seen.size() == 1);
            out.push_back(*seen.begin());
        }
        return out;
    };
    const auto before = servers_of(3);
    std::map<std::string, int> per_server;
    for (const auto& s : before) ++per_server[s];
    CHECK(per_server.size() == 4);  // 200 callers spread over every server

    kill_upstream(*ups[1]);
    const auto after = servers_of(2);
    int moved = 0;
    for (std::size_t i = 0; i < callers.size(); ++i) {
        INFO("caller " << callers[i][0].second << " was on " << before[i] << ", now on " << after[i]);
        if (before[i] == "s1") {
            CHECK(after[i] != "s1");
            ++moved;
        } else {
            CHECK(after[i] == before[i]);
        }
    }
    const double fraction = moved / 200.0;
    MESSAGE("hash: " << moved << " of 200 callers moved when one of 4 servers went");
    CHECK(fraction >= 0.1);
    CHECK(fraction <= 0.4);
}

TEST_CASE("pools: a server killed under load loses no GET") {
    auto a = named("a"), b = named("b"), c = named("c");
    auto gw = start_gateway(pool_config("upstream: { " + servers_yaml({a->port, b->port, c->port}) + " }\n", 2));
    load l(gw->port, 4, 500, "/status?code=200");
    const bool midway = poll_until([&] { return l.done >= 1000; }, 60s);
    kill_upstream(*b);
    auto t = l.join();
    REQUIRE(midway);
    REQUIRE(t.error.empty());
    MESSAGE("killed under load: answers by a " << t.names["a"] << ", b " << t.names["b"] << ", c " << t.names["c"]);
    CHECK(t.statuses.size() == 1);
    CHECK(t.statuses.at(200) == 2000);  // retried on another server, never a 502
    CHECK(t.names.at("b") > 0);
    // The two left took the rest: what a and c received adds up with what b answered.
    CHECK(stat(a->port, "gets") + stat(c->port, "gets") + static_cast<std::uint64_t>(t.names.at("b")) == 2000);
}

TEST_CASE("pools: an idempotent request is retried elsewhere but a POST that reached a server never is") {
    // a answers; b reads each request whole, then resets the connection; d is dead (refuses).
    // No ejection, so b and d keep their turns; a budget that never refuses.
    auto a = named("a"), b = named("b");
    control(b->port, "reset=1");
    const auto d = dead_port();
    auto gw = start_gateway(pool_config("upstream: { " + servers_yaml({a->port, b->port, d}) +
                                        ", retries: 2, retry_budget: \"100%\","
                                        " health: { passive: { eject_after: 0 } } }\n"));
    client c(gw->port);
    for (int i = 0; i < 30; ++i) {
        auto r = c.get("/echo");
        REQUIRE(r.status == 200);
        CHECK(r.header("X-Upstream-Name") == "a");
    }
    CHECK(stat(a->port, "gets") == 30);
    CHECK(stat(b->port, "gets") >= 5);  // b had its turns, each answered by a in the end

    int ok = 0, bad_gateway = 0;
    for (int i = 0; i < 30; ++i) {
        auto r = c.send("POST", "/echo", {}, "body " + std::to_string(i));
        if (r.status == 200) {
            ++ok;
            CHECK(json_of(r).at("body").as_string() == "body " + std::to_string(i));
        } else {
            CHECK(r.status == 502);
            CHECK(json_of(r).at("error") == "bad_gateway");
            ++bad_gateway;
        }
    }
    // A POST refused by d reached no server and went on; one that reached b got its 502.
    // Each POST was received once: by a (200) or by b (502).
    CHECK(bad_gateway >= 5);
    CHECK(stat(a->port, "posts") == static_cast<std::uint64_t>(ok));
    CHECK(stat(b->port, "posts") == static_cast<std::uint64_t>(bad_gateway));
    CHECK(ok + bad_gateway == 30);
}

TEST_CASE("pools: passive ejection keeps a failing server out for eject_for and twice that the next time") {
    auto a = named("a"), b = named("b");
    auto gw = start_gateway(pool_config("upstream: { " + servers_yaml({a->port, b->port}) +
                                        ", health: { passive: { eject_after: 2, eject_for: 1s } } }\n"));
    control(b->port, "status=500");
    client c(gw->port);
    const auto deadline = steady::now() + 40s;
    // Sends until b has answered `n` more times (each a 500); returns when the last came.
    auto until_b_answers = [&](int n) {
        for (;;) {
            REQUIRE(steady::now() < deadline);
            auto r = c.get("/echo");
            const auto at = steady::now();
            if (r.header("X-Upstream-Name") == "b") {
                CHECK(r.status == 500);
                if (--n == 0) return at;
            } else {
                CHECK(r.status == 200);
            }
            // paces the requests (bounds the load), not a synchronisation
            std::this_thread::sleep_for(5ms);
        }
    };
    const auto ejected = until_b_answers(2);
    const auto back = until_b_answers(1);
    // Measured from the client's side of the answer that ejected it: a few ms after the
    // gateway ejected it; the margin covers that.
    const double first_ms = ms_between(ejected, back);
    CHECK(first_ms >= 1000 - 150);
    CHECK(eventually([&] { return count_of(gw->proc->output(), "ejected after 2 failures") >= 1; }));
    CHECK(count_of(gw->proc->output(), "ejected after 2 failures") == 1);

    // Failing again at once: out for 2 s this time.
    const auto ejected_again = until_b_answers(1);
    const auto back_again = until_b_answers(1);
    const double second_ms = ms_between(ejected_again, back_again);
    CHECK(second_ms >= 2000 - 150);
    CHECK(eventually([&] { return count_of(gw->proc->output(), "ejected after 2 failures") >= 2; }));
    CHECK(count_of(gw->proc->output(), "ejected after 2 failures") == 2);
    MESSAGE("passive ejection: out for " << first_ms << " ms, then " << second_ms << " ms");
}

TEST_CASE("pools: retries 0 and 1 and the retry budget's floor of 3") {
    auto a = named("a");
    const auto d = dead_port();
    const std::string no_ejection = ", health: { passive: { eject_after: 0 } }";
    SUBCASE("retries: 0") {
        auto gw = start_gateway(
            pool_config("upstream: { " + servers_yaml({a->port, d}) + ", retries: 0" + no_ejection + " }\n"));
        client c(gw->port);
        int ok = 0, bad_gateway = 0;
        for (int i = 0; i < 20; ++i) {
            auto r = c.get("/echo");
            if (r.status == 502) {
                CHECK(json_of(r).at("error") == "bad_gateway");
                ++bad_gateway;
            } else {
                CHECK(r.status == 200);
                ++ok;
            }
        }
        CHECK(bad_gateway >= 5);  // round robin: about every other request lands on d
        CHECK(stat(a->port, "gets") == static_cast<std::uint64_t>(ok));
    }
    SUBCASE("retries: 1") {
        auto gw = start_gateway(pool_config("upstream: { " + servers_yaml({a->port, d}) +
                                            ", retries: 1, retry_budget: \"100%\"" + no_ejection + " }\n"));
        client c(gw->port);
        for (int i = 0; i < 20; ++i) CHECK(c.get("/echo").status == 200);
        CHECK(stat(a->port, "gets") == 20);
    }
    SUBCASE("retry_budget: 0% still allows 3 retries per 10 s") {
        // b resets every request it reads, so the attempts it got are its "gets".
        auto b = named("b");
        control(b->port, "reset=1");
        auto gw = start_gateway(pool_config("upstream: { " + servers_yaml({a->port, b->port}) +
                                            ", retries: 1, retry_budget: \"0%\"" + no_ejection + " }\n"));
        client c(gw->port);
        const auto start = steady::now();
        int ok = 0, bad_gateway = 0;
        for (int i = 0; i < 20; ++i) {
            auto r = c.get("/echo");
            if (r.status == 502) {
                ++bad_gateway;
            } else {
                CHECK(r.status == 200);
                ++ok;
            }
        }
        const auto to_b = stat(b->port, "gets");
        REQUIRE(to_b > 3);
        if (steady::now() - start < 9s) {
            // Within the 10 s the budget looks back: exactly 3 of b's failures were retried.
            CHECK(bad_gateway == static_cast<int>(to_b) - 3);
            CHECK(stat(a->port, "gets") == static_cast<std::uint64_t>(ok));
        } else {
            MESSAGE("the 20 requests took 9 s or more: the budget's window moved, not checked exactly");
        }
    }
}

TEST_CASE("pools: no server left answers 502 at once") {
    auto a = named("a"), b = named("b");
    SUBCASE("every server refuses") {
        auto gw = start_gateway(pool_config("upstream: { " + servers_yaml({a->port, b->port}) + " }\n"));
        CHECK(fetch(gw->port, "GET", "/echo").status == 200);
        kill_upstream(*a);
        kill_upstream(*b);
        for (int i = 0; i < 8; ++i) {
            const auto start = steady::now();
            auto r = fetch(gw->port, "GET", "/echo");
            CHECK(steady::now() - start < 5s);  // refused at once: no timeout waited out
            CHECK(r.status == 502);
            CHECK(json_of(r).at("error") == "bad_gateway");
        }
    }
    SUBCASE("every server ejected") {
        auto gw = start_gateway(
            pool_config("upstream: { " + servers_yaml({a->port, b->port}) +
                        ", health: { passive: { eject_after: 1, eject_for: 60s, max_ejected_percent: 100 } } }\n"));
        kill_upstream(*a);
        kill_upstream(*b);
        CHECK(fetch(gw->port, "GET", "/echo").status == 502);  // each refused once: both out
        auto r = fetch(gw->port, "GET", "/echo");
        CHECK(r.status == 502);
        CHECK(r.body == R"({"error":"bad_gateway","message":"no upstream server is available"})");
    }
}

TEST_CASE("pools: routes go to their pools and without a pool default no route is 404") {
    auto a = named("a"), w = named("w");
    const std::string pools =
        "upstreams:\n  api: { url: " + url_of(a->port) + " }\n  web: { url: " + url_of(w->port) + " }\n";
    SUBCASE("every request has a route") {
        auto gw = start_gateway(pool_config(pools + R"(routes:
  - { match: { path_prefix: /api/ }, policy: none, upstream: api }
  - { match: { path_prefix: / }, policy: none, upstream: web }
)"));
        for (int i = 0; i < 3; ++i) {
            CHECK(fetch(gw->port, "GET", "/api/x").header("X-Upstream-Name") == "a");
            CHECK(fetch(gw->port, "GET", "/page").header("X-Upstream-Name") == "w");
        }
    }
    SUBCASE("a request without a route") {
        auto gw = start_gateway(pool_config(pools + R"(routes:
  - { match: { path_prefix: /api/ }, policy: none, upstream: api }
)"));
        CHECK(fetch(gw->port, "GET", "/api/x").header("X-Upstream-Name") == "a");
        auto r = fetch(gw->port, "GET", "/page");
        CHECK(r.status == 404);
        CHECK(json_of(r).at("error") == "not_found");
        CHECK(stat(w->port, "requests") == 0);
    }
}

namespace {

// Whether this machine lets the test give a process a mount namespace with its own
// /etc/hosts (root, unshare and mount available).
bool can_bind_hosts(const std::string& hosts) {
    try {
        process p({"unshare", "--mount", "--propagation", "private", "sh", "-c",
                   "mount --bind '" + hosts + "' /etc/hosts && grep -q pool.test /etc/hosts"});
        return p.wait_exit(10s) == 0;
    } catch (const std::exception&) {
        return false;
    }
}

// Two test upstreams on 127.0.0.2 and 127.0.0.3 with the same port.
std::pair<std::unique_ptr<upstream_server>, std::unique_ptr<upstream_server>> twin_upstreams() {
    for (int attempt = 0;; ++attempt) {
        auto two = start_upstream({"--name", "two", "--listen", "127.0.0.2:0"});
        try {
            auto three = start_upstream({"--name", "three", "--listen", "127.0.0.3:" + std::to_string(two->port)});
            return {std::move(two), std::move(three)};
        } catch (const std::exception&) {
            if (attempt == 5) throw;  // the port was taken on 127.0.0.3: try another
        }
    }
}

// Rewrites the file in place (the same inode: a bind mount of it follows).
void rewrite(const std::string& path, const std::string& text) { write_file(path, text); }

}  // namespace

TEST_CASE("pools: a DNS name is resolved again and the servers follow its addresses") {
    const auto dir = make_temp_dir();
    const std::string hosts = dir + "/hosts";
    rewrite(hosts, "127.0.0.1 localhost\n127.0.0.2 pool.test\n");
    if (!can_bind_hosts(hosts)) {
        MESSAGE("skipped: cannot bind-mount an /etc/hosts in a mount namespace here (needs root, unshare, mount)");
        std::filesystem::remove_all(dir);
        return;
    }
    auto [two, three] = twin_upstreams();
    const auto port = std::to_string(two->port);
    const std::string config = dir + "/sluice.yaml";
    write_file(config,
               pool_config("upstream: { servers: [\"http://pool.test:" + port + "\"], resolve_every: 200ms }\n"));
    // exec: the process is the gateway itself, stopped by its PID at the end.
    gateway gw;
    gw.dir = dir;
    gw.config_path = config;
    gw.proc = std::make_unique<process>(std::vector<std::string>{
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        "mount --bind '" + hosts + "' /etc/hosts && exec '" + sluice_bin() + "' --config '" + config + "'"});
    gw.port = static_cast<std::uint16_t>(
        std::stoul(gw.proc->wait_for_line(R"(proxy listening on 127\.0\.0\.1:(\d+))").at(1)));
    client c(gw.port);
    for (int i = 0; i < 5; ++i) CHECK(c.get("/echo").header("X-Upstream-Name") == "two");

    rewrite(hosts, "127.0.0.1 localhost\n127.0.0.3 pool.test\n");
    const bool moved = poll_until([&] { return c.get("/echo").header("X-Upstream-Name") == "three"; }, 20s);
    REQUIRE(moved);
    // (the log names the addresses; the port is the url's)
    CHECK(eventually([&] { return gw.proc->output().find("the servers are now 127.0.0.3\n") != std::string::npos; }));
    for (int i = 0; i < 5; ++i) CHECK(c.get("/echo").header("X-Upstream-Name") == "three");

    rewrite(hosts, "127.0.0.1 localhost\n127.0.0.2 pool.test\n127.0.0.3 pool.test\n");
    std::set<std::string> seen;
    const bool both = poll_until(
        [&] {
            seen.insert(c.get("/echo").header("X-Upstream-Name"));
            return seen.count("two") == 1 && seen.count("three") == 1;
        },
        20s);
    CHECK(both);
    CHECK(eventually([&] {
        const auto out = gw.proc->output();
        return out.find("the servers are now 127.0.0.2, 127.0.0.3\n") != std::string::npos ||
               out.find("the servers are now 127.0.0.3, 127.0.0.2\n") != std::string::npos;
    }));
}
