// One caller under the operator's hand, through the real gateway binary: the admin token,
// GET and DELETE /identities/<kind>/<value>, blocks and overrides, on the memory store, one
// Redis shared by two gateways, and a 3-primary Redis Cluster.
#include "cluster_support.hpp"
#include "e2e.hpp"

#include <boost/json.hpp>

#include <chrono>

using namespace sluice::test;
using namespace std::chrono;

namespace {

const std::string token = "e2e-admin-token-0123456789";
const header_list auth{{"Authorization", "Bearer " + token}};

// A gateway with a token file and `extra` (store, clients, policies, routes).
struct admin_fixture {
    explicit admin_fixture(const std::string& extra, const yaml_overrides& overrides = {}) {
        dir = make_temp_dir();
        token_file = dir + "/admin.token";
        write_file(token_file, token + "\n");
        up = start_upstream();
        auto o = overrides;
        o.emplace_back("admin.token_file", "\"" + token_file + "\"");
        gw = start_gateway(gateway_yaml(up->port, o, extra), {}, {{"SLUICE_HASH_SECRET", "identities-secret"}});
        REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 200; }, seconds(20)));
    }
    response admin(const std::string& method, const std::string& target, const std::string& body = "") const {
        return fetch(gw->admin_port, method, target, auth, body);
    }
    boost::json::object admin_json(const std::string& method, const std::string& target,
                                   const std::string& body = "") const {
        auto r = admin(method, target, body);
        INFO(method << " " << target << ": " << r.status << " " << r.body);
        REQUIRE(r.status == 200);
        return json_of(r);
    }
    int get_status(const std::string& ip, header_list more = {}) const {
        more.emplace_back("X-Forwarded-For", ip);
        return fetch(gw->port, "GET", "/", more).status;
    }
    std::string dir, token_file;
    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;
};

// The tier named `name` of policy `policy` in a GET /identities answer.
boost::json::object tier_of(const boost::json::object& identity, const std::string& policy, const std::string& name) {
    for (const auto& p : identity.at("policies").as_array()) {
        if (p.at("policy").as_string() != policy) continue;
        for (const auto& t : p.at("tiers").as_array())
            if (t.at("name").as_string() == name) return t.as_object();
    }
    FAIL("no tier " << name << " of policy " << policy << " in " << boost::json::serialize(identity));
    return {};
}

std::int64_t field(const boost::json::object& o, const char* key) { return o.at(key).as_int64(); }

const std::string ip_policies = R"(
clients:
  trusted_proxies: ["127.0.0.1/32"]
policies:
  api:
    ip: [ {limit: 5, per: 1h, algorithm: log}, {limit: 50, per: 1h, precision: 6m}, {concurrency: 3} ]
routes:
  - { match: { path_prefix: / }, policy: api }
)";

std::string redis_store(std::uint16_t port, const std::string& type = "redis") {
    return "store:\n  type: " + type + "\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(port) +
           "\"], timeout: 2s }\n";
}

// Users by plan: an API key names the user ("key:<key>"), on plan free unless overridden.
const std::string user_policies = R"(
clients:
  trusted_proxies: ["127.0.0.1/32"]
  user: { api_key_header: X-API-Key, default_plan: free }
plans:
  free: { user: [ {limit: 2, per: 1h, algorithm: log} ] }
  pro:  { user: [ {limit: 6, per: 1h, algorithm: log} ] }
policies:
  api:
    ip: [ {limit: 100, per: 1h, algorithm: log} ]
    user: plan
routes:
  - { match: { path_prefix: / }, policy: api }
)";

// Whether gateway `f` holds a block on identity `path` ("ip/10.0.0.1") now: asked of its
// admin, so that waiting for a block to reach a gateway charges the caller nothing.
bool holds_block(const admin_fixture& f, const std::string& path) {
    return f.admin_json("GET", "/identities/" + path).at("blocked").is_object();
}

// Whether a request from `ip` (with `headers`) is refused as blocked.
bool refused_as_blocked(const admin_fixture& f, const std::string& ip, header_list headers = {}) {
    headers.emplace_back("X-Forwarded-For", ip);
    auto r = fetch(f.gw->port, "GET", "/", headers);
    return r.status == 429 && json_of(r).at("error").as_string() == "blocked";
}

// How many of `n` requests from `ip` (with `headers`) are admitted.
int admitted(const admin_fixture& f, const std::string& ip, int n, const header_list& headers = {}) {
    int ok = 0;
    for (int i = 0; i < n; ++i) ok += f.get_status(ip, headers) == 200;
    return ok;
}

}  // namespace

TEST_CASE("identities: the admin token: 401 without it, 200 with it, open paths, and a reload reads a new token") {
    admin_fixture f(ip_policies);
    const auto port = f.gw->admin_port;
    // Probes and scrapers: admin.open's default.
    CHECK(fetch(port, "GET", "/healthz").status == 200);
    CHECK(fetch(port, "GET", "/readyz").status == 200);
    CHECK(fetch(port, "GET", "/metrics").status == 200);
    for (const auto& [method, target] :
         std::vector<std::pair<std::string, std::string>>{{"GET", "/identities/ip/10.0.0.1"},
                                                          {"GET", "/overrides"},
                                                          {"POST", "/reload"},
                                                          {"GET", "/top"},
                                                          {"GET", "/nowhere"}}) {
        auto r = fetch(port, method, target);
        INFO(method << " " << target);
        CHECK(r.status == 401);
        CHECK(r.header("WWW-Authenticate") == R"(Bearer realm="sluice-admin")");
        CHECK(json_of(r).at("error").as_string() == "unauthorized");
        auto wrong = fetch(port, method, target, {{"Authorization", "Bearer " + token + "x"}});
        CHECK(wrong.status == 401);
        CHECK(wrong.header("WWW-Authenticate") == R"(Bearer realm="sluice-admin", error="invalid_token")");
    }
    CHECK(fetch(port, "GET", "/identities/ip/10.0.0.1", {{"Authorization", "Basic " + token}}).status == 401);
    CHECK(f.admin("GET", "/identities/ip/10.0.0.1").status == 200);
    CHECK(fetch(port, "GET", "/identities/ip/10.0.0.1", {{"authorization", "bearer " + token}}).status == 200);
    CHECK(f.admin("GET", "/top").status == 200);
    CHECK(metric_value(fetch(port, "GET", "/metrics").body, "sluice_admin_unauthorized_total") == 11);

    // A new token at a reload: the old one is refused from then on.
    const std::string next = "e2e-admin-token-next-98765";
    write_file(f.token_file, next);
    auto reloaded = f.admin("POST", "/reload");
    REQUIRE(reloaded.status == 200);
    CHECK(f.admin("GET", "/identities/ip/10.0.0.1").status == 401);
    CHECK(fetch(port, "GET", "/identities/ip/10.0.0.1", {{"Authorization", "Bearer " + next}}).status == 200);
    // A token file emptied: the reload fails and the running token stays.
    write_file(f.token_file, "\n");
    auto failed = fetch(port, "POST", "/reload", {{"Authorization", "Bearer " + next}});
    CHECK(failed.status == 422);
    CHECK(json_of(failed).at("message").as_string().find("admin.token_file: the file must hold one bearer token") !=
          std::string::npos);
    CHECK(fetch(port, "GET", "/identities/ip/10.0.0.1", {{"Authorization", "Bearer " + next}}).status == 200);
}

TEST_CASE("identities: an admin listener off loopback without a token file is refused at start") {
    auto up = start_upstream();
    auto gw = launch_gateway(gateway_yaml(up->port, {{"admin.listen", "\"0.0.0.0:0\""}}));
    const auto code = gw->proc->wait_exit(seconds(15));
    REQUIRE(code.has_value());
    CHECK(*code != 0);
    const auto out = gw->proc->output();
    INFO(out);
    CHECK(std::regex_search(out, std::regex(R"(sluice\.yaml:\d+:\d+: admin\.listen: an address other than loopback )"
                                            R"(needs admin\.token_file)")));
    CHECK(out.find("admin listening") == std::string::npos);
}

TEST_CASE("identities: GET after traffic shows used and remaining, DELETE resets chosen tiers or all (memory)") {
    admin_fixture f(ip_policies);
    REQUIRE(admitted(f, "10.1.0.1", 3) == 3);
    auto id = f.admin_json("GET", "/identities/ip/10.1.0.1");
    CHECK(id.at("kind").as_string() == "ip");
    CHECK(id.at("store").as_string() == "memory");
    CHECK(id.at("blocked").as_bool() == false);
    auto log = tier_of(id, "api", "ip-1h-log");
    CHECK(log.at("algorithm").as_string() == "log");
    CHECK(field(log, "limit") == 5);
    CHECK(field(log, "used") == 3);
    CHECK(field(log, "remaining") == 2);
    CHECK(field(log, "reset") > 3500);
    CHECK(field(log, "reset") <= 3600);
    CHECK(field(log, "reset_ms") > 3500 * 1000);
    auto sliding = tier_of(id, "api", "ip-1h-sliding");
    CHECK(field(sliding, "used") == 3);
    CHECK(field(sliding, "remaining") == 47);
    // A request in flight holds a concurrency slot.
    {
        held h(f.gw->port, "slot");
        REQUIRE(eventually([&] { return upstream_held(f.up->port) == 1; }));
        auto during = f.admin_json("GET", "/identities/ip/127.0.0.1");
        CHECK(field(tier_of(during, "api", "ip-concurrency"), "held") == 1);
        CHECK(field(tier_of(during, "api", "ip-concurrency"), "remaining") == 2);
        let_go(f.up->port, "slot");
        REQUIRE(h.conn.read_response().status == 200);
    }
    // Another address is untouched.
    CHECK(field(tier_of(f.admin_json("GET", "/identities/ip/10.1.0.2"), "api", "ip-1h-log"), "used") == 0);

    // DELETE one tier: the other keeps its count.
    auto reset = f.admin_json("DELETE", "/identities/ip/10.1.0.1?policy=api&tier=ip-1h-log");
    REQUIRE(reset.at("reset").as_array().size() == 1);
    CHECK(boost::json::serialize(reset.at("reset").as_array()[0].at("tiers")) == R"(["ip-1h-log"])");
    id = f.admin_json("GET", "/identities/ip/10.1.0.1");
    CHECK(field(tier_of(id, "api", "ip-1h-log"), "used") == 0);
    CHECK(field(tier_of(id, "api", "ip-1h-sliding"), "used") == 3);

    // Spent, then reset whole: admitted again.
    CHECK(admitted(f, "10.1.0.1", 7) == 5);
    CHECK(f.get_status("10.1.0.1") == 429);
    f.admin_json("DELETE", "/identities/ip/10.1.0.1");
    id = f.admin_json("GET", "/identities/ip/10.1.0.1");
    CHECK(field(tier_of(id, "api", "ip-1h-log"), "used") == 0);
    CHECK(field(tier_of(id, "api", "ip-1h-sliding"), "used") == 0);
    CHECK(f.get_status("10.1.0.1") == 200);

    // Each wrong name has its own answer.
    const auto error_of = [&](const std::string& method, const std::string& target) {
        auto r = f.admin(method, target);
        return std::to_string(r.status) + " " + std::string(json_of(r).at("error").as_string());
    };
    CHECK(error_of("GET", "/identities/header:x-tenant/acme") == "404 unknown_kind");
    CHECK(error_of("GET", "/identities/header:/acme") == "400 bad_kind");
    CHECK(error_of("GET", "/identities/ip/not-an-address") == "400 bad_value");
    CHECK(error_of("GET", "/identities/ip/") == "404 not_found");
    CHECK(error_of("DELETE", "/identities/ip/10.1.0.1?policy=other") == "404 unknown_policy");
    CHECK(error_of("DELETE", "/identities/ip/10.1.0.1?tier=ip-1d") == "404 unknown_tier");
    CHECK(error_of("DELETE", "/identities/ip/10.1.0.1?limit=3") == "400 bad_request");
    CHECK(error_of("POST", "/identities/ip/10.1.0.1") == "405 method_not_allowed");
    CHECK(f.admin("POST", "/identities/ip/10.1.0.1").header("Allow") == "GET, HEAD, DELETE");
    const auto metrics = fetch(f.gw->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(metrics, R"(sluice_admin_actions_total{action="reset"})") == 5);
    CHECK(metric_value(metrics, R"(sluice_admin_actions_total{action="other"})") == 2);
    CHECK(metric_value(metrics, R"(sluice_admin_actions_total{action="get_identity"})") == 9);
    // Each action is a log line, the identifier by its hash.
    CHECK(std::regex_search(f.gw->proc->output(),
                            std::regex(R"(admin: action=reset kind=ip id=[0-9a-f]{32} status=200 peer=127\.0\.0\.1)")));
    CHECK(f.gw->proc->output().find("10.1.0.1") == std::string::npos);
}

TEST_CASE("identities: a block answers 429 with its own Retry-After until it ends, and charges nothing (memory)") {
    admin_fixture f(ip_policies);
    auto b = f.admin_json("POST", "/identities/ip/10.2.0.1/block?for=10m");
    CHECK(field(b, "retry_after") == 600);
    auto r = fetch(f.gw->port, "GET", "/", {{"X-Forwarded-For", "10.2.0.1"}});
    CHECK(r.status == 429);
    const auto retry = std::stoll(r.header("Retry-After"));
    CHECK(retry >= 598);
    CHECK(retry <= 600);
    auto body = json_of(r);
    CHECK(body.at("error").as_string() == "blocked");
    CHECK(body.at("policy").as_string() == "api");
    CHECK(field(body, "retry_after") == retry);
    CHECK(f.get_status("10.2.0.2") == 200);  // only that caller
    // Nothing was charged, and GET says it is blocked.
    auto id = f.admin_json("GET", "/identities/ip/10.2.0.1");
    CHECK(field(tier_of(id, "api", "ip-1h-log"), "used") == 0);
    CHECK(field(id.at("blocked").as_object(), "retry_after") >= 598);
    auto list = f.admin_json("GET", "/overrides");
    REQUIRE(list.at("blocks").as_array().size() == 1);
    CHECK(list.at("blocks").as_array()[0].at("id") == id.at("id"));
    // Lifted.
    f.admin_json("DELETE", "/identities/ip/10.2.0.1/block");
    CHECK(f.get_status("10.2.0.1") == 200);
    CHECK(f.admin("DELETE", "/identities/ip/10.2.0.1/block").status == 404);

    // A short block ends by itself.
    const auto set = steady_clock::now();
    f.admin_json("POST", "/identities/ip/10.2.0.3/block?for=2s");
    CHECK(f.get_status("10.2.0.3") == 429);
    REQUIRE(eventually([&] { return f.get_status("10.2.0.3") == 200; }, seconds(6)));
    CHECK(steady_clock::now() - set >= milliseconds(1900));
    CHECK(f.admin_json("GET", "/overrides").at("blocks").as_array().empty());

    CHECK(f.admin("POST", "/identities/ip/10.2.0.1/block").status == 400);
    CHECK(f.admin("POST", "/identities/ip/10.2.0.1/block?for=ten").status == 400);
    CHECK(json_of(f.admin("POST", "/identities/ip/10.2.0.1/block?for=9000h")).at("field").as_string() == "for");
    const auto metrics = fetch(f.gw->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(metrics, R"(sluice_blocked_total{policy="api"})") >= 3);
    CHECK(metric_value(metrics, R"(sluice_admin_actions_total{action="block"})") == 5);
}

TEST_CASE("identities: an override gives other tiers until it expires, counted afresh (memory)") {
    admin_fixture f(ip_policies);
    REQUIRE(admitted(f, "10.3.0.1", 1) == 1);
    auto o = f.admin_json(
        "PUT", "/overrides/ip/10.3.0.1",
        R"({"policy": "api", "tiers": [{"limit": 2, "per": "1h", "algorithm": "log"}], "expires_in": "3s"})");
    CHECK(o.at("policy").as_string() == "api");
    const auto set = steady_clock::now();
    // Its own tier: two more, whatever the configured tiers had counted.
    CHECK(admitted(f, "10.3.0.1", 4) == 2);
    auto id = f.admin_json("GET", "/identities/ip/10.3.0.1");
    REQUIRE(id.at("policies").as_array().size() == 1);
    CHECK(id.at("policies").as_array()[0].at("override").as_bool());
    CHECK(field(tier_of(id, "api", "ip-1h"), "used") == 2);
    CHECK(field(tier_of(id, "api", "ip-1h"), "limit") == 2);
    auto r = fetch(f.gw->port, "GET", "/", {{"X-Forwarded-For", "10.3.0.1"}});
    CHECK(r.status == 429);
    CHECK(r.header("RateLimit-Policy").find("\"ip-1h\";q=2") != std::string::npos);
    REQUIRE(f.admin_json("GET", "/overrides").at("overrides").as_array().size() == 1);
    // Expired: the configured tiers again, with their own counts (1 of 5 used).
    REQUIRE(eventually([&] { return f.get_status("10.3.0.1") == 200; }, seconds(8)));
    CHECK(steady_clock::now() - set >= milliseconds(2900));
    CHECK(admitted(f, "10.3.0.1", 5) == 3);
    CHECK(f.admin_json("GET", "/overrides").at("overrides").as_array().empty());

    // Ended by DELETE.
    f.admin_json("PUT", "/overrides/ip/10.3.0.2",
                 R"({"policy": "api", "tiers": [{"limit": 1, "per": "1h"}], "expires_in": "1h"})");
    CHECK(admitted(f, "10.3.0.2", 3) == 1);
    CHECK(field(f.admin_json("DELETE", "/overrides/ip/10.3.0.2"), "ended") == 1);
    CHECK(admitted(f, "10.3.0.2", 3) == 3);
    CHECK(f.admin("DELETE", "/overrides/ip/10.3.0.2").status == 404);

    // Bad bodies: 400 naming the field.
    const auto refused = [&](const std::string& body) {
        auto r = f.admin("PUT", "/overrides/ip/10.3.0.3", body);
        INFO(body << " -> " << r.body);
        CHECK(r.status == 400);
        auto j = json_of(r);
        return std::string(j.contains("field") ? j.at("field").as_string() : j.at("error").as_string());
    };
    CHECK(refused(R"({"policy": "api", "tiers": [{"limit": 2, "per": "1h"}])") == "bad_json");
    CHECK(refused(R"([1, 2])") == "bad_json");
    CHECK(refused(R"({"policy": "api", "tiers": [{"limit": 0, "per": "1h"}], "expires_in": "1h"})") ==
          "tiers[0].limit");
    CHECK(refused(R"({"policy": "api", "tiers": [{"limit": 2, "per": "1 hour"}], "expires_in": "1h"})") ==
          "tiers[0].per");
    CHECK(refused(R"({"policy": "api", "tiers": [{"limit": 2, "per": "1h", "colour": 1}], "expires_in": "1h"})") ==
          "tiers[0].colour");
    CHECK(refused(R"({"policy": "api", "tiers": [], "expires_in": "1h"})") == "tiers");
    CHECK(refused(R"({"policy": "web", "tiers": [{"limit": 2, "per": "1h"}], "expires_in": "1h"})") == "policy");
    CHECK(refused(R"({"policy": "api", "tiers": [{"limit": 2, "per": "1h"}]})") == "expires_in");
    CHECK(refused(R"({"policy": "api", "tiers": [{"limit": 2, "per": "1h"}], "expires_in": "9000h"})") == "expires_in");
    CHECK(refused(R"({"plan": "pro", "expires_in": "1h"})") == "plan");
    CHECK(refused(R"({"expires_in": "1h"})") == "policy");
}

TEST_CASE("identities: a user's plan override, until it ends (memory)") {
    admin_fixture f(user_policies);
    const header_list alice{{"X-API-Key", "alice-key-0123456789"}};
    CHECK(admitted(f, "10.4.0.1", 3, alice) == 2);  // plan free: 2
    auto id = f.admin_json("GET", "/identities/user/key:alice-key-0123456789");
    CHECK(field(tier_of(id, "api", "free-user-1h"), "used") == 2);
    CHECK(field(tier_of(id, "api", "pro-user-1h"), "used") == 0);
    f.admin_json("PUT", "/overrides/user/key:alice-key-0123456789", R"({"plan": "pro", "expires_in": "1h"})");
    CHECK(admitted(f, "10.4.0.1", 8, alice) == 6);  // plan pro: 6, its own counts
    id = f.admin_json("GET", "/identities/user/key:alice-key-0123456789");
    CHECK(id.at("plan_override").as_string() == "pro");
    CHECK(field(tier_of(id, "api", "pro-user-1h"), "used") == 6);
    CHECK(
        f.admin("PUT", "/overrides/user/key:alice-key-0123456789", R"({"plan": "gold", "expires_in": "1h"})").status ==
        400);
    f.admin_json("DELETE", "/overrides/user/key:alice-key-0123456789");
    CHECK(f.get_status("10.4.0.1", alice) == 429);  // free again, spent
    // A user blocked: refused on the route whatever its address.
    f.admin_json("POST", "/identities/user/key:alice-key-0123456789/block?for=1h");
    auto r = fetch(f.gw->port, "GET", "/", {{"X-API-Key", "alice-key-0123456789"}, {"X-Forwarded-For", "10.4.0.9"}});
    CHECK(r.status == 429);
    CHECK(json_of(r).at("error").as_string() == "blocked");
    CHECK(f.get_status("10.4.0.9", {{"X-API-Key", "bob-key-0123456789"}}) == 200);
}

TEST_CASE("identities: other kinds by their canonical text: a header and a composite (memory)") {
    admin_fixture f(R"(
clients:
  trusted_proxies: ["127.0.0.1/32"]
policies:
  api:
    header:X-Tenant: [ {limit: 4, per: 1h, algorithm: log} ]
    header:X-Tenant+ip: [ {limit: 3, per: 1h, algorithm: log} ]
routes:
  - { match: { path_prefix: / }, policy: api }
)");
    const header_list acme{{"X-Tenant", "acme corp"}};
    CHECK(admitted(f, "10.9.0.1", 2, acme) == 2);
    CHECK(admitted(f, "10.9.0.2", 1, acme) == 1);
    auto tenant = f.admin_json("GET", "/identities/header:X-Tenant/acme%20corp");
    CHECK(tenant.at("kind").as_string() == "header:x-tenant");
    CHECK(field(tier_of(tenant, "api", "header:x-tenant-1h"), "used") == 3);
    auto pair = f.admin_json("GET", "/identities/header:x-tenant+ip/acme%20corp+10.9.0.1");
    CHECK(field(tier_of(pair, "api", "header:x-tenant+ip-1h"), "used") == 2);
    CHECK(f.admin("GET", "/identities/header:x-tenant+ip/acme").status == 400);  // a part missing
    // The tenant blocked: every address of it refused, another tenant not.
    f.admin_json("POST", "/identities/header:x-tenant/acme%20corp/block?for=1m");
    CHECK(refused_as_blocked(f, "10.9.0.3", acme));
    CHECK(f.get_status("10.9.0.3", {{"X-Tenant", "globex"}}) == 200);
    // The access log line says so (written within a second).
    CHECK(eventually([&] {
        return f.gw->proc->output().find(R"("decision":"blocked","id_kind":"header:x-tenant")") != std::string::npos;
    }));
    f.admin_json("DELETE", "/identities/header:x-tenant/acme%20corp/block");
    // One combination overridden.
    f.admin_json("PUT", "/overrides/header:x-tenant+ip/acme%20corp+10.9.0.4",
                 R"({"policy": "api", "tiers": [{"limit": 1, "per": "1h", "algorithm": "log"}], "expires_in": "1h"})");
    CHECK(admitted(f, "10.9.0.4", 2, acme) == 1);
}

TEST_CASE("identities: blocks and overrides survive a reload (memory)") {
    admin_fixture f(ip_policies);
    f.admin_json("POST", "/identities/ip/10.5.0.1/block?for=1h");
    f.admin_json("PUT", "/overrides/ip/10.5.0.2",
                 R"({"policy": "api", "tiers": [{"limit": 1, "per": "1h"}], "expires_in": "1h"})");
    REQUIRE(f.admin("POST", "/reload").status == 200);
    CHECK(f.get_status("10.5.0.1") == 429);
    CHECK(admitted(f, "10.5.0.2", 3) == 1);
}

TEST_CASE(
    "identities: two gateways on one Redis: GET reads the fleet's counts, blocks and overrides set on one "
    "apply on both, through a reload") {
    redis_server redis(unused_port());
    admin_fixture a(redis_store(redis.port) + ip_policies);
    admin_fixture b(redis_store(redis.port) + ip_policies);
    CHECK(admitted(a, "10.6.0.1", 2) == 2);
    CHECK(admitted(b, "10.6.0.1", 1) == 1);
    for (const auto* f : {&a, &b}) {
        auto id = f->admin_json("GET", "/identities/ip/10.6.0.1");
        CHECK(id.at("store").as_string() == "redis");
        CHECK(field(tier_of(id, "api", "ip-1h-log"), "used") == 3);
        CHECK(field(tier_of(id, "api", "ip-1h-log"), "remaining") == 2);
        CHECK(field(tier_of(id, "api", "ip-1h-sliding"), "used") == 3);
    }
    // Spent on both; a reset on one admits on the other (its cached denial dropped).
    CHECK(admitted(a, "10.6.0.1", 3) == 2);
    CHECK(b.get_status("10.6.0.1") == 429);
    a.admin_json("DELETE", "/identities/ip/10.6.0.1");
    CHECK(field(tier_of(b.admin_json("GET", "/identities/ip/10.6.0.1"), "api", "ip-1h-log"), "used") == 0);
    CHECK(eventually([&] { return b.get_status("10.6.0.1") == 200; }, seconds(5)));

    // A block set on a, applied by b within a poll.
    a.admin_json("POST", "/identities/ip/10.6.0.2/block?for=1h");
    CHECK(refused_as_blocked(a, "10.6.0.2"));
    CHECK(eventually([&] { return holds_block(b, "ip/10.6.0.2"); }, seconds(5)));
    CHECK(refused_as_blocked(b, "10.6.0.2"));
    auto r = fetch(b.gw->port, "GET", "/", {{"X-Forwarded-For", "10.6.0.2"}});
    CHECK(std::stoll(r.header("Retry-After")) >= 3590);
    // An override set on b, applied by a; its counts are the fleet's.
    b.admin_json("PUT", "/overrides/ip/10.6.0.3",
                 R"({"policy": "api", "tiers": [{"limit": 3, "per": "1h", "algorithm": "log"}], "expires_in": "1h"})");
    REQUIRE(eventually([&] { return a.admin_json("GET", "/overrides").at("overrides").as_array().size() == 1; },
                       seconds(5)));
    CHECK(admitted(a, "10.6.0.3", 2) + admitted(b, "10.6.0.3", 2) == 3);
    // Through a reload of each.
    REQUIRE(a.admin("POST", "/reload").status == 200);
    REQUIRE(b.admin("POST", "/reload").status == 200);
    CHECK(refused_as_blocked(a, "10.6.0.2"));
    CHECK(refused_as_blocked(b, "10.6.0.2"));
    CHECK(a.get_status("10.6.0.3") == 429);
    // Lifted on b, admitted by a within a poll.
    b.admin_json("DELETE", "/identities/ip/10.6.0.2/block");
    CHECK(eventually([&] { return !holds_block(a, "ip/10.6.0.2"); }, seconds(5)));
    CHECK(a.get_status("10.6.0.2") == 200);
    b.admin_json("DELETE", "/overrides/ip/10.6.0.3");
    CHECK(eventually([&] { return a.get_status("10.6.0.3") == 200; }, seconds(5)));
    // What the store holds: one HASH of entries under the prefix's controls key, hashed.
    CHECK(a.admin_json("GET", "/overrides").at("blocks").as_array().empty());
}

TEST_CASE("identities: a gateway that starts on Redis applies the blocks already stored") {
    redis_server redis(unused_port());
    admin_fixture a(redis_store(redis.port) + ip_policies);
    a.admin_json("POST", "/identities/ip/10.7.0.1/block?for=1h");
    admin_fixture b(redis_store(redis.port) + ip_policies);
    CHECK(b.get_status("10.7.0.1") == 429);  // from its first request
}

TEST_CASE("identities: on a 3-primary Cluster, GET and DELETE per identifier's slot, blocks and overrides") {
    cluster_nodes c(3, 0);
    // Address and user: two identifiers, each in its own slot (one EVALSHA per identifier).
    const std::string policies = R"(
clients:
  trusted_proxies: ["127.0.0.1/32"]
  user: { api_key_header: X-API-Key }
policies:
  api:
    ip: [ {limit: 4, per: 1h, algorithm: log} ]
    user: [ {limit: 6, per: 1h, precision: 6m} ]
routes:
  - { match: { path_prefix: / }, policy: api }
)";
    admin_fixture a(redis_store(c.ports[0], "redis-cluster") + policies);
    admin_fixture b(redis_store(c.ports[1], "redis-cluster") + policies);
    const header_list carol{{"X-API-Key", "carol-key-0123456789"}};
    CHECK(admitted(a, "10.8.0.1", 2, carol) + admitted(b, "10.8.0.2", 1, carol) == 3);
    auto user = b.admin_json("GET", "/identities/user/key:carol-key-0123456789");
    CHECK(field(tier_of(user, "api", "user-1h"), "used") == 3);
    CHECK(field(tier_of(a.admin_json("GET", "/identities/ip/10.8.0.1"), "api", "ip-1h"), "used") == 2);
    // Reset the user on a: both gateways admit it again for its full limit (the address's
    // tier, four a piece, stays).
    CHECK(admitted(a, "10.8.0.3", 4, carol) == 3);  // the user's 6 spent
    a.admin_json("DELETE", "/identities/user/key:carol-key-0123456789");
    CHECK(field(tier_of(a.admin_json("GET", "/identities/user/key:carol-key-0123456789"), "api", "user-1h"), "used") ==
          0);
    CHECK(eventually([&] { return b.get_status("10.8.0.4", carol) == 200; }, seconds(5)));
    CHECK(field(tier_of(a.admin_json("GET", "/identities/ip/10.8.0.1"), "api", "ip-1h"), "used") == 2);
    // A block on the user, an override on an address, each set on one gateway and applied by the other.
    b.admin_json("POST", "/identities/user/key:carol-key-0123456789/block?for=1h");
    CHECK(eventually([&] { return holds_block(a, "user/key:carol-key-0123456789"); }, seconds(5)));
    CHECK(refused_as_blocked(a, "10.8.0.5", carol));
    CHECK(a.get_status("10.8.0.5") == 200);  // the address alone is not blocked
    a.admin_json("PUT", "/overrides/ip/10.8.0.6",
                 R"({"policy": "api", "tiers": [{"limit": 1, "per": "1h", "algorithm": "log"}], "expires_in": "1h"})");
    REQUIRE(eventually([&] { return b.admin_json("GET", "/overrides").at("overrides").as_array().size() == 1; },
                       seconds(5)));
    CHECK(admitted(b, "10.8.0.6", 2) + admitted(a, "10.8.0.6", 2) == 1);
    auto ip = b.admin_json("GET", "/identities/ip/10.8.0.6");
    CHECK(field(tier_of(ip, "api", "ip-1h"), "used") == 1);
    CHECK(field(tier_of(ip, "api", "ip-1h"), "limit") == 1);
}
