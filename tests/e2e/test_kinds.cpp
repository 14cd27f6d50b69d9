// Identifier kinds beyond ip and user through the real gateway (docs/configuration.md,
// "identifier kinds"): header, query, claim, route and composite limits, the one
// all-or-nothing decision across kinds, on_missing, the distinct-value bound and its
// metric, and the names in RateLimit-Policy, /top and the access log; on the memory store
// and on one Redis (test_cluster.cpp has the Cluster's).
#include "e2e.hpp"

#include <boost/json/array.hpp>

#include <map>
#include <optional>
#include <regex>
#include <set>

using namespace sluice::test;
using namespace std::chrono;

namespace {

const std::string jwt_secret = "kinds-e2e-secret-of-some-length";

// A gateway with `body` (clients, policies, routes) on the memory store, or on the Redis
// at `redis_port` when given. Clients behind 127.0.0.1 name their address in X-Forwarded-For.
struct kinds_fixture {
    kinds_fixture(const std::string& body, std::optional<std::uint16_t> redis_port,
                  const yaml_overrides& overrides = {}) {
        std::string store;
        if (redis_port)
            store = "store:\n  type: redis\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" +
                    std::to_string(*redis_port) + "\"], timeout: 2s }\n";
        up = start_upstream();
        gw = start_gateway(gateway_yaml(up->port, overrides, store + body), {},
                           {{"SLUICE_HASH_SECRET", "kinds-secret"}, {"SLUICE_KINDS_JWT", jwt_secret}});
        REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 200; }, seconds(20)));
    }
    response get(const std::string& target, header_list headers = {}, const char* client = "198.51.100.1") const {
        headers.emplace_back("X-Forwarded-For", client);
        return fetch(gw->port, "GET", target, std::move(headers));
    }
    std::string metrics() const { return fetch(gw->admin_port, "GET", "/metrics").body; }
    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;
};

// The `r` (remaining) of tier `name` in a RateLimit field, or -1.
long remaining(const response& r, const std::string& name) {
    const std::regex item("\"" + std::regex_replace(name, std::regex(R"([+.])"), R"(\$&)") + R"(\";r=(\d+))");
    std::smatch m;
    const std::string field = r.header("RateLimit");
    return std::regex_search(field, m, item) ? std::stol(m[1]) : -1;
}

// The stores to run on: the memory store, and one Redis started for the test.
struct backend {
    std::string name;
    std::unique_ptr<redis_server> redis;
    std::optional<std::uint16_t> port() const {
        return redis ? std::optional<std::uint16_t>(redis->port) : std::nullopt;
    }
};

backend pick_backend() {
    backend b;
    SUBCASE("memory store") { b.name = "memory"; }
    SUBCASE("one Redis") {
        b.name = "redis";
        b.redis = std::make_unique<redis_server>(unused_port());
    }
    return b;
}

const std::string kinds_config = R"(clients:
  trusted_proxies: ["127.0.0.1/32"]
  user: { api_key_header: X-API-Key, jwt: { algorithms: [HS256], secret_env: SLUICE_KINDS_JWT } }
policies:
  h: { header:X-Tenant: [ {limit: 2, per: 1h, algorithm: log} ] }
  q: { query:key: [ {limit: 2, per: 1h, algorithm: log} ] }
  c: { claim:org: [ {limit: 2, per: 1h, algorithm: log} ] }
  r: { route: [ {limit: 3, per: 1h, algorithm: log} ] }
  x: { header:X-Tenant+ip: [ {limit: 2, per: 1h, algorithm: log} ] }
routes:
  - { match: { path: /h }, policy: h }
  - { match: { path: /q }, policy: q }
  - { match: { path: /c }, policy: c }
  - { match: { path_prefix: /r }, policy: r, name: orders }
  - { match: { path: /x }, policy: x }
)";

}  // namespace

TEST_CASE("kinds: header, query, claim, route and composite limits, each value on its own counter") {
    const backend b = pick_backend();
    CAPTURE(b.name);
    kinds_fixture f(kinds_config, b.port());

    // header:X-Tenant: two per tenant, whatever the address; the name in RateLimit-Policy.
    const auto acme = f.get("/h", {{"X-Tenant", "acme"}});
    CHECK(acme.status == 200);
    CHECK(acme.header("RateLimit-Policy") == R"("header:x-tenant-1h";q=2;w=3600)");
    CHECK(remaining(acme, "header:x-tenant-1h") == 1);
    CHECK(f.get("/h", {{"x-tenant", "acme"}}, "198.51.100.2").status == 200);
    const auto third = f.get("/h", {{"X-Tenant", "acme"}}, "198.51.100.3");
    CHECK(third.status == 429);
    CHECK(json_of(third).at("policy").as_string() == "h");
    CHECK(f.get("/h", {{"X-Tenant", "globex"}}).status == 200);
    // A fresh tenant first and the spent one after it: refused, not counted on the fresh one.
    const auto two = f.get("/h", {{"X-Tenant", "fresh"}, {"X-Tenant", "acme"}});
    CHECK(two.status == 400);
    CHECK(json_of(two).at("error").as_string() == "ambiguous_identifier");
    CHECK(f.get("/h", {{"X-Tenant", "acme"}, {"X-Tenant", "acme"}}).status == 429);
    // X_Tenant reaches the upstream, where CGI-style servers read it as X-Tenant: so does the
    // limit.
    CHECK(f.get("/h", {{"X_Tenant", "acme"}}).status == 429);
    const auto underscored = f.get("/h", {{"X_Tenant", "initech"}});
    CHECK(underscored.status == 200);
    CHECK(remaining(underscored, "header:x-tenant-1h") == 1);
    CHECK(echoed(json_of(underscored), "X_Tenant") == "initech");
    // No header (or a blank one) is no tenant: skipped, so nothing limits the request.
    for (int i = 0; i < 4; ++i) {
        const auto bare = f.get("/h", i % 2 ? header_list{{"X-Tenant", "  "}} : header_list{});
        CHECK(bare.status == 200);
        CHECK_FALSE(bare.has_header("RateLimit-Policy"));
    }

    // query:key, percent-decoded: k%2F1 and k/1 are one value.
    CHECK(f.get("/q?key=k%2F1").status == 200);
    CHECK(f.get("/q?other=1&key=k/1").status == 200);
    // A parameter given twice, differently: the upstream may read either, so neither counts
    // and the request is refused; twice alike is one value.
    const auto twice = f.get("/q?key=else&key=k/1");
    CHECK(twice.status == 400);
    CHECK(json_of(twice).at("error").as_string() == "ambiguous_identifier");
    CHECK(json_of(twice).at("message").as_string() ==
          "query:key given twice with different values: policy q cannot tell which to limit by");
    CHECK(f.get("/q?key=k/1&key=k%2F1").status == 429);
    // Nor can a '#' hide the second from the limit (servers differ on whether it ends the
    // query): refused.
    const auto hash = f.get("/q?key=fresh#&key=k/1");
    CHECK(hash.status == 400);
    CHECK(json_of(hash).at("message").as_string() == "fragment in request target");
    CHECK(f.get("/q?key=else").status == 200);
    // A byte the URI grammar does not allow, or a bad escape, in another parameter hides
    // nothing: "else" has had its two.
    CHECK(f.get("/q?key=else&x=a|b").status == 200);
    CHECK(f.get("/q?x=%zz&key=else").status == 429);
    CHECK(f.get("/q").status == 200);

    // claim:org from a verified JWT; a token without the claim is not limited by it.
    const auto token = [&](const std::string& sub, const std::string& org) {
        std::vector<std::pair<std::string, std::string>> claims;
        if (!org.empty()) claims.emplace_back("org", org);
        return header_list{{"Authorization", "Bearer " + hs256_token(jwt_secret, sub, 600, claims)}};
    };
    CHECK(f.get("/c", token("alice", "org-1")).status == 200);
    CHECK(f.get("/c", token("bob", "org-1")).status == 200);  // another user of the same org
    CHECK(f.get("/c", token("carol", "org-1")).status == 429);
    // An API key beside the token names the user, but the token's org still counts.
    auto keyed = token("carol", "org-1");
    keyed.emplace_back("X-API-Key", "any-key");
    CHECK(f.get("/c", keyed).status == 429);
    CHECK(f.get("/c", token("alice", "org-2")).status == 200);
    for (int i = 0; i < 3; ++i) CHECK(f.get("/c", token("dave", "")).status == 200);
    CHECK(f.get("/c", {{"Authorization", "Bearer " + hs256_token("not-the-secret", "eve", 600, {{"org", "x"}})}})
              .status == 401);

    // route: one counter for every caller of the route, whatever the path under it.
    CHECK(f.get("/r/1", {}, "203.0.113.1").status == 200);
    CHECK(f.get("/r/2", {}, "203.0.113.2").status == 200);
    const auto last = f.get("/r", {}, "203.0.113.3");
    CHECK(last.status == 200);
    CHECK(last.header("RateLimit-Policy") == R"("route-1h";q=3;w=3600)");
    CHECK(f.get("/r/3", {}, "203.0.113.4").status == 429);

    // header:X-Tenant+ip: one counter per tenant per address.
    CHECK(f.get("/x", {{"X-Tenant", "acme"}}, "192.0.2.1").status == 200);
    CHECK(f.get("/x", {{"X-Tenant", "acme"}}, "192.0.2.1").status == 200);
    const auto pair = f.get("/x", {{"X-Tenant", "acme"}}, "192.0.2.1");
    CHECK(pair.status == 429);
    CHECK(pair.header("RateLimit-Policy") == R"("header:x-tenant+ip-1h";q=2;w=3600)");
    CHECK(f.get("/x", {{"X-Tenant", "acme"}}, "192.0.2.2").status == 200);
    CHECK(f.get("/x", {{"X-Tenant", "globex"}}, "192.0.2.1").status == 200);
    CHECK(f.get("/x", {}, "192.0.2.1").status == 200);  // a composite missing a part is skipped
}

TEST_CASE("kinds: a request refused by one kind charges none of the others, /top and the access log name the kind") {
    const backend b = pick_backend();
    CAPTURE(b.name);
    const auto dir = make_temp_dir();
    const std::string log_path = dir + "/access.log";
    kinds_fixture f(R"(clients:
  trusted_proxies: ["127.0.0.1/32"]
policies:
  api:
    ip: [ {limit: 20, per: 1h, algorithm: log} ]
    header:X-Tenant: [ {limit: 2, per: 1h, algorithm: log} ]
    route: [ {limit: 6, per: 1h, algorithm: log} ]
routes:
  - { match: { path_prefix: / }, policy: api, name: all }
)",
                    b.port(), {{"log.access.path", "\"" + log_path + "\""}});
    const header_list acme{{"X-Tenant", "acme"}};
    const auto first = f.get("/", acme);
    CHECK(first.status == 200);
    CHECK(first.header("RateLimit-Policy") ==
          R"("ip-1h";q=20;w=3600, "header:x-tenant-1h";q=2;w=3600, "route-1h";q=6;w=3600)");
    CHECK(f.get("/", acme).status == 200);
    // The tenant refuses: neither the address nor the route is charged, however often.
    for (int i = 0; i < 3; ++i) {
        const auto refused = f.get("/", acme);
        CHECK(refused.status == 429);
        CHECK(remaining(refused, "header:x-tenant-1h") == 0);
    }
    const auto next = f.get("/", {{"X-Tenant", "globex"}});
    REQUIRE(next.status == 200);
    CHECK(remaining(next, "ip-1h") == 17);
    CHECK(remaining(next, "route-1h") == 3);
    CHECK(remaining(next, "header:x-tenant-1h") == 1);
    // The route refuses: the tenants and the address keep what they had.
    CHECK(f.get("/", {{"X-Tenant", "t1"}}).status == 200);
    CHECK(f.get("/", {{"X-Tenant", "t2"}}).status == 200);
    CHECK(f.get("/", {{"X-Tenant", "t3"}}).status == 200);  // the route's sixth
    for (int i = 0; i < 4; ++i) CHECK(f.get("/", {{"X-Tenant", "t4"}}).status == 429);
    // Refused by the route five times, t4 still has its two and the address its fourteen: a
    // refusal's fields state what would remain after it, 1 and 13.
    const auto by_route = f.get("/", {{"X-Tenant", "t4"}});
    CHECK(by_route.status == 429);
    CHECK(remaining(by_route, "header:x-tenant-1h") == 1);
    CHECK(remaining(by_route, "ip-1h") == 13);
    CHECK(remaining(by_route, "route-1h") == 0);

    // GET /top: the tenant and the route, each named by its kind.
    const auto top = boost::json::parse(fetch(f.gw->admin_port, "GET", "/top?n=10").body).as_object();
    std::map<std::string, std::string> kinds;
    for (const auto& o : top.at("offenders").as_array())
        kinds[std::string(o.at("kind").as_string())] = std::string(o.at("identity").as_string());
    CHECK(kinds["header:x-tenant"] == "acme");
    CHECK(kinds["route"] == "all");
    CHECK(kinds.count("ip") == 0);

    // The access log names the kind that refused; an admission names the address.
    std::set<std::string> refused_kinds, allowed_kinds;
    CHECK(eventually([&] {
        refused_kinds.clear();
        allowed_kinds.clear();
        std::istringstream in(read_file(log_path));
        std::size_t lines = 0;
        for (std::string line; std::getline(in, line);) {
            if (line.empty() || line.back() != '}') continue;
            ++lines;
            const auto o = boost::json::parse(line).as_object();
            (o.at("decision").as_string() == "limited" ? refused_kinds : allowed_kinds)
                .insert(std::string(o.at("id_kind").as_string()));
        }
        return lines == 14;
    }));
    CHECK(refused_kinds == std::set<std::string>{"header:x-tenant", "route"});
    CHECK(allowed_kinds == std::set<std::string>{"ip"});
}

TEST_CASE("kinds: on_missing refuse answers 400 with a JSON reason and charges nothing, skip lets through") {
    const backend b = pick_backend();
    CAPTURE(b.name);
    kinds_fixture f(R"(clients:
  trusted_proxies: ["127.0.0.1/32"]
  user: { api_key_header: X-API-Key }
policies:
  strict:
    ip: [ {limit: 10, per: 1h, algorithm: log} ]
    header:X-Tenant+query:region: [ {limit: 5, per: 1h, algorithm: log} ]
    on_missing: { header:x-tenant+query:region: refuse }
  keyed:
    user: [ {limit: 5, per: 1h, algorithm: log} ]
    on_missing: { user: refuse }
  lenient:
    ip: [ {limit: 10, per: 1h, algorithm: log} ]
    header:X-Tenant: [ {limit: 1, per: 1h, algorithm: log} ]
routes:
  - { match: { path: /strict }, policy: strict }
  - { match: { path: /keyed }, policy: keyed }
  - { match: { path: /lenient }, policy: lenient }
)",
                    b.port());
    for (int i = 0; i < 3; ++i) {
        const auto r = f.get("/strict?region=eu");
        CHECK(r.status == 400);
        const auto body = json_of(r);
        CHECK(body.at("error").as_string() == "missing_identifier");
        CHECK(body.at("message").as_string() ==
              "missing header:x-tenant (of header:x-tenant+query:region): policy strict refuses requests without it");
        CHECK_FALSE(r.has_header("RateLimit-Policy"));
    }
    const auto no_region = f.get("/strict", {{"X-Tenant", "acme"}});
    CHECK(no_region.status == 400);
    CHECK(json_of(no_region).at("message").as_string() ==
          "missing query:region (of header:x-tenant+query:region): policy strict refuses requests without it");
    // The refusals charged nothing: the address has all ten.
    const auto whole = f.get("/strict?region=eu", {{"X-Tenant", "acme"}});
    CHECK(whole.status == 200);
    CHECK(remaining(whole, "ip-1h") == 9);
    CHECK(remaining(whole, "header:x-tenant+query:region-1h") == 4);

    const auto anonymous = f.get("/keyed");
    CHECK(anonymous.status == 400);
    CHECK(json_of(anonymous).at("message").as_string() ==
          "missing user: policy keyed refuses requests without credentials");
    CHECK(f.get("/keyed", {{"X-API-Key", "k1"}}).status == 200);

    // The connection is kept, as for a 401 or a 403 (docs/operations.md's error table): the
    // request was well formed, only its values did not do.
    connection c("127.0.0.1", f.gw->port, 5s);
    const auto on_c = [&](const std::string& target, const std::string& fields) {
        c.send("GET " + target + " HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 198.51.100.9\r\n" + fields + "\r\n");
        return c.read_response();
    };
    const auto missing = on_c("/strict?region=eu", "");
    CHECK(missing.status == 400);
    CHECK(json_of(missing).at("error").as_string() == "missing_identifier");
    const auto ambiguous = on_c("/strict?region=eu", "X-Tenant: a\r\nX-Tenant: b\r\n");
    CHECK(ambiguous.status == 400);
    CHECK(json_of(ambiguous).at("error").as_string() == "ambiguous_identifier");
    CHECK(on_c("/strict?region=eu", "X-Tenant: a\r\n").status == 200);

    // skip: without the header, the ip tiers alone decide.
    for (int i = 0; i < 3; ++i) CHECK(f.get("/lenient").status == 200);
    CHECK(f.get("/lenient", {{"X-Tenant", "acme"}}).status == 200);
    CHECK(f.get("/lenient", {{"X-Tenant", "acme"}}).status == 429);
    CHECK(eventually_metric(f.gw->admin_port, R"(sluice_requests_total{route="/strict",status="4xx"})", 6) == 6);
}

TEST_CASE("kinds: max_values bounds a kind's identifiers in the memory store, evictions counted by kind") {
    kinds_fixture f(R"(clients:
  trusted_proxies: ["127.0.0.1/32"]
policies:
  api:
    header:X-Tenant: [ {limit: 1, per: 1h, algorithm: log} ]
    max_values: { header:X-Tenant: 64 }
routes:
  - { match: { path_prefix: / }, policy: api }
)",
                    std::nullopt);
    constexpr int values = 300;
    {
        connection c("127.0.0.1", f.gw->port);
        for (int i = 0; i < values; ++i) {
            c.send(make_request("GET", "/", {{"X-Tenant", "tenant-" + std::to_string(i)}}));
            REQUIRE(c.read_response().status == 200);
        }
    }
    const auto text = f.metrics();
    const double held = metric_value(text, "sluice_store_keys");
    const double evicted = metric_value(text, R"(sluice_store_kind_evictions_total{kind="header:x-tenant"})");
    MESSAGE("held " << held << ", evicted " << evicted);
    CHECK(held <= 64);
    CHECK(held > 0);
    CHECK(evicted == values - held);
    CHECK(metric_value(text, "sluice_store_evictions_total") == 0);  // store.memory.max_keys was not reached
    // An evicted value starts afresh: its second request is admitted again (the 64 or fewer
    // still held refuse theirs).
    int admitted = 0;
    {
        connection c("127.0.0.1", f.gw->port);
        for (int i = 0; i < values; ++i) {
            c.send(make_request("GET", "/", {{"X-Tenant", "tenant-" + std::to_string(i)}}));
            const int status = c.read_response().status;
            CHECK((status == 200 || status == 429));
            admitted += status == 200;
        }
    }
    CHECK(admitted >= values - static_cast<int>(held));
}

// A concurrency tier of a kind after ip, user and route (the request's third key or later):
// the slot is given back when the answer ends, and renewed while it runs, as ip's and user's.
TEST_CASE("kinds: a concurrency tier of another kind gives its slot back when the answer ends") {
    const backend b = pick_backend();
    CAPTURE(b.name);
    kinds_fixture f(R"(clients:
  trusted_proxies: ["127.0.0.1/32"]
  user: { api_key_header: X-API-Key }
policies:
  api:
    ip: [ {limit: 100, per: 1h, algorithm: log} ]
    user: [ {limit: 100, per: 1h, algorithm: log} ]
    route: [ {limit: 100, per: 1h, algorithm: log} ]
    header:X-Tenant: [ {concurrency: 1, lease: 1h} ]
routes:
  - { match: { path_prefix: / }, policy: api }
)",
                    b.port());
    for (int i = 0; i < 5; ++i) {
        const auto r = f.get("/", {{"X-Tenant", "acme"}, {"X-API-Key", "k1"}});
        CHECK(r.status == 200);
        CHECK(remaining(r, "header:x-tenant-concurrency") == 0);
        // The slot goes back just after the answer's last byte (as test_concurrency.cpp waits).
        CHECK(eventually_metric(f.gw->admin_port, "sluice_concurrency_slots_held", 0) == 0);
    }
}
