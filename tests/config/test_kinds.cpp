// Identifier kinds as policy keys (policies.<name>.<kind>, on_missing, max_values): what
// loads, and every refusal at its FILE:LINE:COLUMN: key.
#include "config/config.hpp"

#include "load_error.hpp"

#include <doctest/doctest.h>

#include <string>

namespace cfg = sluice::config;
using cfg::testing::error_of;

namespace {

const std::string head = "upstream: { url: 'http://127.0.0.1:3000' }\n";

}  // namespace

TEST_CASE("policy kinds: header, claim, query, route and composites load with their tiers") {
    auto c = cfg::load_string(head + R"(clients: { user: { jwt: { algorithms: [HS256], secret_env: HOME } } }
policies:
  api:
    ip: [ {limit: 10, per: 1s} ]
    header:X-Tenant: [ {limit: 100, per: 1s}, {limit: 1000, per: 1h, algorithm: fixed} ]
    route: [ {limit: 500, per: 1s, algorithm: gcra} ]
    claim:org+ip: [ {concurrency: 5} ]
    query:api_key: [ {limit: 3, per: 1m, algorithm: log} ]
    on_missing: { header:x-tenant: refuse, query:api_key: skip }
    max_values: { header:X-TENANT: 500 }
)",
                              "kinds.yaml");
    REQUIRE(c->policies.size() == 1);
    const auto& p = c->policies[0];
    CHECK(p.ip.size() == 1);
    REQUIRE(p.kinds.size() == 4);
    CHECK(p.kinds[0].spec.text == "header:x-tenant");
    CHECK(p.kinds[0].path == "policies.api.header:X-Tenant");
    CHECK(p.kinds[0].at == "kinds.yaml:6:22: policies.api.header:X-Tenant");
    REQUIRE(p.kinds[0].tiers.size() == 2);
    CHECK(p.kinds[0].tiers[0].kind == "header:x-tenant");
    CHECK(p.kinds[0].tiers[1].algo == cfg::algorithm::fixed);
    CHECK(p.kinds[0].missing == cfg::on_missing::refuse);
    CHECK(p.kinds[0].max_values == 500);
    CHECK(p.kinds[1].spec.text == "route");
    CHECK(p.kinds[1].missing == cfg::on_missing::skip);
    CHECK(p.kinds[2].spec.text == "claim:org+ip");
    CHECK(p.kinds[2].tiers[0].algo == cfg::algorithm::concurrency);
    CHECK(p.kinds[2].max_values == cfg::default_max_values);
    CHECK(p.kinds[3].spec.text == "query:api_key");
    CHECK(p.kinds[3].missing == cfg::on_missing::skip);
    CHECK(p.user_missing == cfg::on_missing::skip);
    CHECK(cfg::bounded_kind(p.kinds[0].spec));
    CHECK_FALSE(cfg::bounded_kind(p.kinds[1].spec));
    CHECK(cfg::bounded_kind(p.kinds[2].spec));

    // A policy of other kinds alone; on_missing for the user.
    auto only = cfg::load_string(head + R"(clients: { user: { api_key_header: X-Key } }
policies:
  tenants:
    header:X-Tenant: [ {limit: 1, per: 1s} ]
  keys:
    user: [ {limit: 1, per: 1s} ]
    on_missing: { user: refuse }
)",
                                 "only.yaml");
    CHECK(only->policies[0].ip.empty());
    CHECK(only->policies[0].kinds.size() == 1);
    CHECK(only->policies[1].user_missing == cfg::on_missing::refuse);
}

TEST_CASE("policy kinds: errors at the key, the value or the entry") {
    const auto policy = [](const std::string& body) { return error_of(head + "policies:\n  api:\n" + body); };
    // An unknown key is read as a kind, and refused with the grammar.
    CHECK(policy("    shadoww: true\n") ==
          "inline.yaml:4:5: policies.api.shadoww: unknown kind \"shadoww\": an identifier kind is ip, user, route, "
          "header:<name>, claim:<name> or query:<name>, or distinct ones joined by '+'");
    CHECK(policy("    header: [ {limit: 1, per: 1s} ]\n") ==
          "inline.yaml:4:5: policies.api.header: header needs a name: header:<name>");
    CHECK(policy("    header:X Y: [ {limit: 1, per: 1s} ]\n") ==
          "inline.yaml:4:5: policies.api.header:X Y: header name \"X Y\" is not an HTTP field name");
    CHECK(policy("    ip+ip: [ {limit: 1, per: 1s} ]\n") ==
          "inline.yaml:4:5: policies.api.ip+ip: \"ip\" appears twice");
    CHECK(policy("    route:x: [ {limit: 1, per: 1s} ]\n") ==
          "inline.yaml:4:5: policies.api.route:x: route takes no name");
    // One kind written twice (header names ignore case).
    CHECK(policy("    header:X-Tenant: [ {limit: 1, per: 1s} ]\n    header:x-tenant: [ {limit: 2, per: 1m} ]\n") ==
          "inline.yaml:5:5: policies.api.header:x-tenant: the same kind as policies.api.header:X-Tenant "
          "(header:x-tenant)");
    CHECK(policy("    route: [ {limit: 1, per: 1s} ]\n    route: [ {limit: 2, per: 1m} ]\n") ==
          "inline.yaml:5:5: policies.api.route: duplicate key");
    // Tiers as under ip.
    CHECK(policy("    route: []\n") == "inline.yaml:4:12: policies.api.route: expected a list of at least one tier");
    CHECK(policy("    route: [ {limit: 1} ]\n") ==
          "inline.yaml:4:14: policies.api.route[0].per: required key is missing");
    CHECK(policy("    route: [ {limit: 1, per: 1s}, {limit: 2, per: 1s} ]\n") ==
          "inline.yaml:4:35: policies.api.route[1]: duplicate tier (tier 0 has the same algorithm, per and precision "
          "or burst: both would count in one place)");
    CHECK(policy("    count_rejected: true\n    query:q: [ {limit: 1, per: 1s, algorithm: log} ]\n") ==
          "inline.yaml:4:21: policies.api.count_rejected: count_rejected cannot apply to log tiers (a log would keep "
          "every refused request)");
    // At most 8 kinds.
    std::string nine = "    ip: [ {limit: 1, per: 1s} ]\n";
    for (int i = 0; i < 8; ++i) nine += "    header:h" + std::to_string(i) + ": [ {limit: 1, per: 1s} ]\n";
    CHECK(policy(nine) ==
          "inline.yaml:4:5: policies.api: a policy limits by at most 8 kinds, ip and user included "
          "(one store request carries them all)");
    // claim: needs a JWT.
    CHECK(policy("    claim:org: [ {limit: 1, per: 1s} ]\n") ==
          "inline.yaml:4:16: policies.api.claim:org: claim:<name> needs clients.user.jwt (claims are read from the "
          "verified token)");
}

TEST_CASE("policy kinds: on_missing and max_values") {
    const auto policy = [](const std::string& body) {
        return error_of(head +
                        "policies:\n  api:\n    ip: [ {limit: 1, per: 1s} ]\n"
                        "    header:X-Tenant: [ {limit: 1, per: 1s} ]\n    route: [ {limit: 9, per: 1s} ]\n" +
                        body);
    };
    CHECK(policy("    on_missing: { header:x-tenant: refuse }\n") == "<no error>");
    CHECK(policy("    on_missing: { header:X-Tenant: deny }\n") ==
          "inline.yaml:7:36: policies.api.on_missing.header:X-Tenant: must be one of skip, refuse");
    CHECK(policy("    on_missing: { ip: refuse }\n") ==
          "inline.yaml:7:19: policies.api.on_missing.ip: a request always has an address: ip is never missing");
    CHECK(policy("    on_missing: { user: refuse }\n") ==
          "inline.yaml:7:19: policies.api.on_missing.user: the policy has no tiers for user");
    CHECK(policy("    on_missing: { header:X-Other: refuse }\n") ==
          "inline.yaml:7:19: policies.api.on_missing.header:X-Other: the policy has no tiers for header:x-other");
    CHECK(policy("    on_missing: { nope: refuse }\n") ==
          "inline.yaml:7:19: policies.api.on_missing.nope: unknown kind \"nope\": an identifier kind is ip, user, "
          "route, header:<name>, claim:<name> or query:<name>, or distinct ones joined by '+'");
    CHECK(policy("    on_missing: [ ip ]\n") == "inline.yaml:7:17: policies.api.on_missing: expected a mapping");
    CHECK(policy("    max_values: { header:x-tenant: 64 }\n") == "<no error>");
    CHECK(policy("    max_values: { header:x-tenant: 63 }\n") ==
          "inline.yaml:7:36: policies.api.max_values.header:x-tenant: must be between 64 and 100000000");
    CHECK(policy("    max_values: { header:x-tenant: many }\n") ==
          "inline.yaml:7:36: policies.api.max_values.header:x-tenant: expected a non-negative integer");
    CHECK(policy("    max_values: { ip: 1000 }\n") ==
          "inline.yaml:7:19: policies.api.max_values.ip: applies to kinds whose values the caller chooses (not ip, "
          "user or route: store.memory.max_keys bounds them)");
    CHECK(policy("    max_values: { route: 1000 }\n") ==
          "inline.yaml:7:19: policies.api.max_values.route: applies to kinds whose values the caller chooses (not ip, "
          "user or route: store.memory.max_keys bounds them)");
    CHECK(policy("    max_values: { query:q: 1000 }\n") ==
          "inline.yaml:7:19: policies.api.max_values.query:q: the policy has no tiers for query:q");
}

TEST_CASE("policy kinds: a route's cost fits every kind's tiers") {
    CHECK(error_of(head + R"(policies:
  api:
    header:X-Tenant: [ {limit: 3, per: 1s} ]
routes:
  - { match: { path: /a }, policy: api, cost: 4 }
)") == "inline.yaml:6:47: routes[0].cost: cost 4 exceeds the limit 3 of policies.api.header:X-Tenant[0]");
}
