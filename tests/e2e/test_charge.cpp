// Charge by outcome (routes[].charge) and reported costs that lower the charge, through the
// real gateway binary on the memory store, one Redis node and a 3-primary Redis Cluster:
// a request's cost is reserved at admission and settled at its answer, exactly.
//
// Every policy limits both the address and the user (an API key) by the same exact `log`
// tier, so each request carries two identifiers (on a Cluster, mostly on two primaries): a
// settlement that missed one of them would end its tier early or late.
#include "cluster_support.hpp"
#include "e2e.hpp"

#include <string>
#include <vector>

using namespace sluice::test;

namespace {

const header_list caller(const std::string& host) { return {{"Host", host}, {"X-API-Key", "charge-test-key"}}; }

std::string tiers(int limit) {
    const std::string t = "[ {limit: " + std::to_string(limit) + ", per: 1h, algorithm: log} ]";
    return "{ ip: " + t + ", user: " + t + " }";
}

// `store`: the store: section ("" for the memory store). Requests name their route by Host.
std::string charge_yaml(const std::string& store, std::uint16_t down_port) {
    return store + R"(
clients:
  user: { api_key_header: X-API-Key }
upstreams:
  down: { url: "http://127.0.0.1:)" +
           std::to_string(down_port) + R"(" }
policies:
  login: )" +
           tiers(3) +
           R"(
  api: )" + tiers(4) +
           R"(
  held: )" +
           tiers(3) +
           R"(
  gone: )" +
           tiers(2) +
           R"(
  reported: )" +
           tiers(10) +
           R"(
  over: )" +
           tiers(2) +
           R"(
routes:
  - { name: login, match: { path_prefix: /, host: login.test }, policy: login, charge: { on_status: [401] } }
  - { name: api, match: { path_prefix: /, host: api.test }, policy: api, charge: { refund_on: [5xx] } }
  - { name: down, match: { path_prefix: /, host: down.test }, policy: api, upstream: down, charge: { refund_on: 5xx } }
  - { name: held, match: { path_prefix: /, host: held.test }, policy: held, charge: { on_status: 401 } }
  - { name: gone, match: { path_prefix: /, host: gone.test }, policy: gone, charge: { on_status: 401 } }
  - { name: over, match: { path_prefix: /, host: over.test }, policy: over, charge: { on_status: [401] } }
  - { name: cost, match: { path_prefix: /, host: cost.test }, policy: reported, cost: 2,
      cost_header: X-Request-Cost, max_cost: 6 }
)";
}

// A request held at the test upstream (/hold) until let go, on the route of `host`.
struct pending {
    pending(std::uint16_t port, const std::string& host, const std::string& name) : conn("127.0.0.1", port, 20s) {
        conn.send(make_request("GET", "/hold?name=" + name, caller(host)));
    }
    connection conn;
};

std::string settled(const std::string& policy, const std::string& result) {
    return "sluice_charge_settlements_total{policy=\"" + policy + "\",result=\"" + result + "\"}";
}

// One gateway on `store` in front of the test upstream (and a pool nothing listens on).
struct charged_gateway {
    explicit charged_gateway(const std::string& store) {
        up = start_upstream();
        gw = start_gateway(gateway_yaml(up->port, {}, charge_yaml(store, unused_port())));
        REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 200; }, 20s));
    }
    int status(const std::string& host, const std::string& target) const {
        return fetch(gw->port, "GET", target, caller(host)).status;
    }
    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;
};

// The login brute-force case: failed sign-ins (401) cost, good ones (200) do not; the limit
// of 3 failures is reached exactly, whatever number of good ones came between. Then nothing
// passes, a good sign-in neither: there is no room left to reserve its cost in.
void login_failures_cost(const charged_gateway& g) {
    for (int i = 0; i < 6; ++i) REQUIRE(g.status("login.test", "/status?code=200") == 200);
    for (int i = 0; i < 2; ++i) {
        CHECK(g.status("login.test", "/status?code=401") == 401);
        CHECK(g.status("login.test", "/status?code=200") == 200);  // good ones still pass
    }
    CHECK(g.status("login.test", "/status?code=401") == 401);
    CHECK(g.status("login.test", "/status?code=200") == 429);  // 3 failures: nothing more
    CHECK(g.status("login.test", "/status?code=401") == 429);
    CHECK(eventually_metric(g.gw->admin_port, settled("login", "refunded"), 8) == 8);
    CHECK(eventually_metric(g.gw->admin_port, settled("login", "charged"), 3) == 3);
    // The access log says what each request cost in the end.
    g.gw->proc->wait_for_line(R"re("route":"login".*"status":401.*"cost":1)re");
    g.gw->proc->wait_for_line(R"re("route":"login".*"status":200.*"cost":0)re");
}

// refund_on [5xx]: the upstream's 5xx answers and Sluice's own 502 (a pool that refuses the
// connection) are given back exactly; other statuses are charged, up to the limit of 4.
void failures_refunded(const charged_gateway& g) {
    for (int i = 0; i < 3; ++i) {
        CHECK(g.status("api.test", "/status?code=503") == 503);
        CHECK(g.status("api.test", "/status?code=500") == 500);
        CHECK(g.status("down.test", "/") == 502);
    }
    CHECK(g.status("api.test", "/status?code=404") == 404);
    CHECK(g.status("api.test", "/status?code=404") == 404);
    CHECK(g.status("api.test", "/status?code=200") == 200);
    CHECK(g.status("api.test", "/status?code=503") == 503);  // refunded: 3 charged still
    CHECK(g.status("api.test", "/status?code=200") == 200);  // the 4th
    CHECK(g.status("api.test", "/status?code=503") == 429);
    CHECK(g.status("down.test", "/") == 429);
    CHECK(eventually_metric(g.gw->admin_port, settled("api", "refunded"), 10) == 10);
    CHECK(eventually_metric(g.gw->admin_port, settled("api", "charged"), 4) == 4);
}

// The reservation: 6 requests sent at once on a limit of 3, all of whose answers will cost
// nothing (200 with on_status [401]): exactly 3 are admitted while they are pending, the
// others refused at once. Once answered, the 3 are given back, and 3 failures are admitted.
void reserved_while_pending(const charged_gateway& g) {
    std::vector<std::unique_ptr<pending>> sent;
    for (int i = 0; i < 6; ++i) sent.push_back(std::make_unique<pending>(g.gw->port, "held.test", "held"));
    const std::string limited =
        "sluice_rate_limit_decisions_total{policy=\"held\",result=\"limited\",listener=\"proxy\"}";
    const std::string allowed =
        "sluice_rate_limit_decisions_total{policy=\"held\",result=\"allowed\",listener=\"proxy\"}";
    CHECK(eventually_metric(g.gw->admin_port, limited, 3) == 3);
    CHECK(eventually_metric(g.gw->admin_port, allowed, 3) == 3);
    CHECK(eventually([&] { return upstream_held(g.up->port) == 3; }));
    // Still pending, still full: another is refused.
    CHECK(g.status("held.test", "/status?code=401") == 429);
    CHECK(fetch(g.up->port, "GET", "/let-go?name=held").body == "3");
    int ok = 0, refused = 0;
    for (auto& p : sent) {
        const auto r = p->conn.read_response();
        ok += r.status == 200;
        refused += r.status == 429;
    }
    CHECK(ok == 3);
    CHECK(refused == 3);
    for (int i = 0; i < 3; ++i) CHECK(g.status("held.test", "/status?code=401") == 401);
    CHECK(g.status("held.test", "/status?code=401") == 429);
    CHECK(g.status("held.test", "/status?code=200") == 429);
}

// A client that leaves before any answer keeps its reservation (its outcome is unknown):
// with a limit of 2, one failure more is admitted after it, not two.
void left_early_stays_charged(const charged_gateway& g) {
    {
        pending p(g.gw->port, "gone.test", "gone");
        REQUIRE(eventually([&] { return upstream_held(g.up->port) == 1; }));
    }  // closed before the upstream answered
    g.gw->proc->wait_for_line(R"re("route":"gone".*"status":499.*"cost":1)re");
    fetch(g.up->port, "GET", "/let-go?name=gone");  // the upstream may have seen it go already
    CHECK(g.status("gone.test", "/status?code=401") == 401);
    CHECK(g.status("gone.test", "/status?code=200") == 429);
    CHECK(g.status("gone.test", "/status?code=401") == 429);
}

// cost_header: a reported cost below the route's (2) lowers the charge, down to 0; above,
// raises it (up to max_cost 6). The tier of 10 is filled exactly: 0 x 5, then 6, 1, 3.
void reported_cost_lowers_and_raises(const charged_gateway& g) {
    for (int i = 0; i < 5; ++i) CHECK(g.status("cost.test", "/cost?n=0") == 200);
    CHECK(g.status("cost.test", "/cost?n=9") == 200);  // taken as 6: 6 charged
    CHECK(g.status("cost.test", "/cost?n=1") == 200);  // 2 reserved (8), then 1: 7
    CHECK(g.status("cost.test", "/cost?n=3") == 200);  // 2 reserved (9), then 3: 10
    CHECK(g.status("cost.test", "/cost?n=0") == 429);  // 10 + 2 > 10
    CHECK(eventually_metric(g.gw->admin_port, settled("reported", "refunded"), 6) == 6);
    CHECK(eventually_metric(g.gw->admin_port, settled("reported", "raised"), 2) == 2);
}

// An operator's override (admin PUT /overrides) gives the caller other tiers: the settlement
// gives back from those, the tiers its admission was charged in. Good sign-ins cost nothing
// under the override's limit of 4 as under the policy's own.
void override_settled_in_its_tiers(const charged_gateway& g) {
    for (int i = 0; i < 2; ++i) REQUIRE(g.status("over.test", "/status?code=401") == 401);
    REQUIRE(g.status("over.test", "/status?code=401") == 429);  // the policy's 2 are spent
    const std::string body =
        R"({"policy": "over", "tiers": [{"limit": 4, "per": "1h", "algorithm": "log"}], "expires_in": "1h"})";
    for (const char* who : {"/overrides/ip/127.0.0.1", "/overrides/user/key:charge-test-key"})
        REQUIRE(fetch(g.gw->admin_port, "PUT", who, {}, body).status == 200);
    // The override's tiers count afresh once every worker has it: a refused failure costs
    // nothing, so the first to pass is the 1st of 4.
    REQUIRE(eventually([&] { return g.status("over.test", "/status?code=401") == 401; }));
    for (int i = 0; i < 5; ++i) CHECK(g.status("over.test", "/status?code=200") == 200);
    for (int i = 0; i < 3; ++i) CHECK(g.status("over.test", "/status?code=401") == 401);
    CHECK(g.status("over.test", "/status?code=401") == 429);
    CHECK(g.status("over.test", "/status?code=200") == 429);
}

// Every case on one gateway: each has a policy of its own.
void run_all(const std::string& store) {
    charged_gateway g(store);
    login_failures_cost(g);
    failures_refunded(g);
    reserved_while_pending(g);
    left_early_stays_charged(g);
    reported_cost_lowers_and_raises(g);
    override_settled_in_its_tiers(g);
    const auto m = fetch(g.gw->admin_port, "GET", "/metrics").body;
    for (const char* p : {"login", "api", "held", "gone", "reported", "over"})
        CHECK(metric_value(m, settled(p, "failed")) == 0);
    CHECK(metric_value(m, "sluice_store_errors_total") == 0);
}

}  // namespace

TEST_CASE("charge by outcome: reserved at admission, settled at the answer (memory)") { run_all(""); }

TEST_CASE("charge by outcome: the same on one Redis node") {
    redis_server redis(unused_port());
    run_all("store:\n  type: redis\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis.port) +
            "\"], timeout: 2s }\n");
}

TEST_CASE("charge by outcome: the same on a 3-primary Redis Cluster") {
    cluster_nodes c(3, 0);
    run_all("store:\n  type: redis-cluster\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" +
            std::to_string(c.ports[0]) + "\"], timeout: 2s }\n");
}

TEST_CASE("charge by outcome: a refund on one gateway lifts the refusal another gave (one Redis node)") {
    redis_server redis(unused_port());
    const std::string store =
        "store:\n  type: redis\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis.port) +
        "\"], timeout: 2s }\n";
    charged_gateway a(store), b(store);
    std::vector<std::unique_ptr<pending>> sent;
    for (int i = 0; i < 3; ++i) sent.push_back(std::make_unique<pending>(a.gw->port, "held.test", "fleet"));
    REQUIRE(eventually([&] { return upstream_held(a.up->port) == 3; }));
    // Refused on the other gateway while the three are pending: a refusal its worker's deny
    // cache would keep answering for the hour of the tier. One connection: one worker.
    connection on_b("127.0.0.1", b.gw->port);
    const auto ask_b = [&] {
        on_b.send(make_request("GET", "/status?code=401", caller("held.test")));
        return on_b.read_response().status;
    };
    CHECK(ask_b() == 429);
    CHECK(ask_b() == 429);
    CHECK(fetch(a.up->port, "GET", "/let-go?name=fleet").body == "3");
    for (auto& p : sent) CHECK(p->conn.read_response().status == 200);  // not charged: given back
    for (int i = 0; i < 3; ++i) CHECK(ask_b() == 401);
    CHECK(ask_b() == 429);
    CHECK(a.status("held.test", "/status?code=200") == 429);
}
