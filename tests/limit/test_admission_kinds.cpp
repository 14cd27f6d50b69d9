// The limit phase with identifier kinds beyond ip and user (limit/admission.hpp): a policy's
// kinds compiled from a config, the caller's values as the identify phase reads them, the
// keys of the store request (order, hashes, bounds), missing values (skip, refuse), the
// identifier a refusal names, and the all-or-nothing decision on the memory store.
#include "identity/identify.hpp"
#include "limit/admission.hpp"
#include "limit/policy.hpp"
#include "store/memory_store.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>

namespace {

namespace identity = sluice::identity;
namespace limit = sluice::limit;
namespace config = sluice::config;
namespace bhttp = boost::beast::http;
using limit::outcome;

struct world {
    std::shared_ptr<const config::config> cfg;
    std::vector<limit::policy> policies;
    identity::clients clients;
    identity::hasher hasher{"secret-k"};
    limit::offenders refusals;
    limit::admission_context ctx;

    explicit world(const std::string& policies_yaml)
        : cfg(config::load_string("upstream: { url: 'http://127.0.0.1:3000' }\n"
                                  "clients: { user: { api_key_header: X-Key } }\n"
                                  "policies:\n" +
                                      policies_yaml,
                                  "kinds.yaml")),
          policies(limit::compile_policies(*cfg)),
          clients(cfg->clients, cfg->policies),
          ctx{cfg->clients.ipv6_prefix,
              hasher,
              1,
              config::store_config::failure_mode::allow,
              config::response_config::header_style::ietf,
              &refusals} {}

    identity::caller who(std::string_view target,
                         std::initializer_list<std::pair<std::string_view, std::string_view>> fields,
                         const char* client = "192.0.2.7") {
        sluice::http::message_head h;
        h.set_request_line(bhttp::verb::get, "GET", target, 11);
        h.add(bhttp::field::host, "Host", "example.test");
        for (const auto& [name, value] : fields) h.add(bhttp::string_to_field(name), name, value);
        auto r = identity::identify(clients, h, boost::asio::ip::make_address(client), true, 0);
        REQUIRE_FALSE(r.refused);
        return r.who;
    }
    limit::digest hash(std::string_view kind, std::string_view input) const { return hasher.hash(kind, input); }
};

}  // namespace

TEST_CASE("admission kinds: keys in policy order, each value hashed under its kind's text") {
    world w(R"(  api:
    header:X-Tenant: [ {limit: 5, per: 1m} ]
    ip: [ {limit: 9, per: 1m} ]
    route: [ {limit: 100, per: 1m} ]
    header:x-tenant+ip: [ {limit: 3, per: 1m} ]
    query:k+user: [ {limit: 2, per: 1m} ]
    user: [ {limit: 7, per: 1m} ]
)");
    const auto& p = w.policies[0];
    REQUIRE(p.kinds.size() == 4);
    CHECK(p.kinds[0].max_values == config::default_max_values);
    CHECK(p.kinds[1].max_values == 0);  // route: no bound of its own
    CHECK(p.kinds[0].tiers[0].id == "api/header:x-tenant/sliding/1m/6s");
    CHECK(p.kinds[0].tiers[0].name == "header:x-tenant-1m");
    CHECK(p.ip[0].id == "api/ip/sliding/1m/6s");  // unchanged by the other kinds
    CHECK(p.user[0].name == "user-1m");

    limit::admission a;
    outcome out;
    const std::string orders = "orders";
    const auto who = w.who("/x?k=v1", {{"X-Tenant", "acme"}, {"X-Key", "key-1"}});
    REQUIRE(a.prepare(w.ctx, p, 1, who, out, &orders));
    const auto keys = a.request().keys;
    REQUIRE(keys.size() == 6);
    CHECK(keys[0].kind == identity::kind::ip);
    CHECK(keys[0].id == w.hash("ip", "192.0.2.7"));
    CHECK(keys[1].kind == identity::kind::user);
    CHECK(keys[1].id == w.hash("user", "key:key-1"));
    CHECK(std::string(to_string(keys[2].kind)) == "header:x-tenant");
    CHECK(keys[2].id == w.hash("header:x-tenant", "acme"));
    CHECK(keys[2].max_values == config::default_max_values);
    CHECK(keys[2].tiers.data() == p.kinds[0].tiers.data());
    CHECK(std::string(to_string(keys[3].kind)) == "route");
    CHECK(keys[3].id == w.hash("route", "orders"));
    CHECK(std::string(to_string(keys[4].kind)) == "header:x-tenant+ip");
    CHECK(keys[4].id == w.hash("header:x-tenant+ip", "4:acme9:192.0.2.7"));
    CHECK(keys[4].kind == identity::kind_of("header:x-tenant+ip"));
    CHECK(keys[5].id == w.hash("query:k+user", "2:v19:key:key-1"));
    CHECK(out.id_kind == identity::kind::user);  // the access log names the user when nothing refused

    // Without the tenant header: its kinds are skipped (on_missing defaults to skip).
    outcome bare;
    REQUIRE(a.prepare(w.ctx, p, 1, w.who("/x", {}), bare, &orders));
    const auto fewer = a.request().keys;
    REQUIRE(fewer.size() == 2);
    CHECK(fewer[0].kind == identity::kind::ip);
    CHECK(std::string(to_string(fewer[1].kind)) == "route");
    CHECK(bare.id_kind == identity::kind::ip);
}

TEST_CASE("admission kinds: a composite with a user and a query, and every part needed") {
    world w(R"(  api:
    query:k+user: [ {limit: 2, per: 1m} ]
)");
    const auto& p = w.policies[0];
    limit::admission a;
    outcome out;
    REQUIRE(a.prepare(w.ctx, p, 1, w.who("/x?k=a%2Bb", {{"X-Key", "key-1"}}), out));
    REQUIRE(a.request().keys.size() == 1);
    CHECK(a.request().keys[0].id != w.hash("query:k+user", "3:a b9:key:key-1"));
    CHECK(a.request().keys[0].id == w.hash("query:k+user", "3:a+b9:key:key-1"));
    CHECK(std::string(to_string(*out.id_kind)) == "query:k+user");
    // Without the user, the composite is missing: nothing to limit.
    outcome none;
    CHECK_FALSE(a.prepare(w.ctx, p, 1, w.who("/x?k=a", {}), none));
    CHECK(none.what == outcome::kind::pass);
    CHECK(limit::to_string(none.decision) == std::string("none"));
}

TEST_CASE("admission kinds: on_missing refuse answers 400 and names the missing value, a shadow policy never does") {
    world w(R"(  api:
    ip: [ {limit: 9, per: 1m} ]
    header:X-Tenant+query:region: [ {limit: 3, per: 1m} ]
    user: [ {limit: 7, per: 1m} ]
    on_missing: { header:x-tenant+query:region: refuse, user: refuse }
  quiet:
    shadow: true
    header:X-Tenant: [ {limit: 3, per: 1m} ]
    on_missing: { header:X-Tenant: refuse }
)");
    limit::admission a;
    outcome out;
    CHECK_FALSE(a.prepare(w.ctx, w.policies[0], 1, w.who("/x?region=eu", {{"X-Tenant", "acme"}}), out));
    CHECK(out.what == outcome::kind::missing);
    CHECK(limit::to_string(out.decision) == std::string("missing"));
    CHECK(out.reason == "missing user: policy api refuses requests without credentials");

    outcome no_region;
    CHECK_FALSE(a.prepare(w.ctx, w.policies[0], 1, w.who("/x", {{"X-Tenant", "acme"}, {"X-Key", "k"}}), no_region));
    CHECK(no_region.what == outcome::kind::missing);
    CHECK(no_region.reason ==
          "missing query:region (of header:x-tenant+query:region): policy api refuses requests without it");

    outcome all;
    CHECK(a.prepare(w.ctx, w.policies[0], 1, w.who("/x?region=eu", {{"X-Tenant", "acme"}, {"X-Key", "k"}}), all));
    CHECK(a.request().keys.size() == 3);
    CHECK(all.what == outcome::kind::pass);

    outcome shadow;
    CHECK_FALSE(a.prepare(w.ctx, w.policies[1], 1, w.who("/x", {}), shadow));
    CHECK(shadow.what == outcome::kind::pass);
}

TEST_CASE("admission kinds: one all-or-nothing decision on the memory store, the refusal names its kind") {
    world w(R"(  api:
    ip: [ {limit: 100, per: 1m, algorithm: log} ]
    header:X-Tenant: [ {limit: 2, per: 1m, algorithm: log} ]
    route: [ {limit: 100, per: 1m, algorithm: log} ]
)");
    const auto& p = w.policies[0];
    sluice::store::memory_store store(10'000);
    sluice::metrics::registry reg(1);
    limit::admission a;
    const std::string orders = "orders";
    const auto decide = [&](const char* tenant, outcome& out) {
        const auto who = w.who("/x", {{"X-Tenant", tenant}});  // alive until conclude()
        REQUIRE(a.prepare(w.ctx, p, 1, who, out, &orders));
        auto r = store.try_check(a.request());
        REQUIRE(r);
        a.conclude(w.ctx, p, *r, reg.worker(0), out);
        return r->verdict;
    };
    for (int i = 0; i < 2; ++i) {
        outcome out;
        CHECK(decide("acme", out).allowed);
    }
    outcome refused;
    const auto d = decide("acme", refused);
    CHECK_FALSE(d.allowed);
    CHECK(refused.what == outcome::kind::limited);
    CHECK(std::string(to_string(*refused.id_kind)) == "header:x-tenant");
    CHECK(refused.id == w.hash("header:x-tenant", "acme"));
    CHECK(refused.fields.find("\"header:x-tenant-1m\";q=2;w=60") != std::string::npos);
    CHECK(refused.fields.find("\"route-1m\";q=100;w=60") != std::string::npos);
    // The refused request charged neither the address nor the route: both still have 98.
    outcome other;
    const auto next = decide("globex", other);
    REQUIRE(next.allowed);
    for (const auto& t : next.tiers) {
        CAPTURE(t.t->name);
        if (t.t->name == "ip-1m" || t.t->name == "route-1m") CHECK(t.remaining == 97);
        if (t.t->name == "header:x-tenant-1m") CHECK(t.remaining == 1);
    }
    // GET /top names the tenant by its value.
    std::vector<limit::offender> seen;
    w.refusals.collect(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
        seen);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].label == "acme");
    CHECK(std::string(to_string(seen[0].kind)) == "header:x-tenant");
}

TEST_CASE("admission kinds: GET /top labels: values percent-encoded as an admin path, users masked") {
    world w(R"(  api:
    header:X-T+user+ip: [ {limit: 1, per: 1m, algorithm: log} ]
)");
    sluice::store::memory_store store(10'000);
    sluice::metrics::registry reg(1);
    limit::admission a;
    const auto who = w.who("/x", {{"X-T", "a+b/c d%"}, {"X-Key", "0123456789abcdefWXYZ"}});
    for (int i = 0; i < 2; ++i) {
        outcome out;
        REQUIRE(a.prepare(w.ctx, w.policies[0], 1, who, out));
        a.conclude(w.ctx, w.policies[0], *store.try_check(a.request()), reg.worker(0), out);
    }
    std::vector<limit::offender> seen;
    w.refusals.collect(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
        seen);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].label == "a%2Bb%2Fc%20d%25+key:…WXYZ+192.0.2.7");
}
