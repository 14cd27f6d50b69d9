// Policies compiled from a config (limit/policy.hpp): tier ids, which name the counters in
// the store, and tier names, which the rate-limit headers show.
#include "limit/policy.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

namespace config = sluice::config;
namespace limit = sluice::limit;

std::vector<limit::policy> compile(const char* yaml) {
    return limit::compile_policies(*config::load_string(yaml, "policy.yaml"));
}

std::vector<std::string> ids(const std::vector<limit::tier>& tiers) {
    std::vector<std::string> out;
    for (const auto& t : tiers) out.push_back(t.id);
    return out;
}

std::vector<std::string> names(const limit::policy& p) {
    std::vector<std::string> out;
    for (const auto* list : {&p.ip, &p.user}) {
        for (const auto& t : *list) out.push_back(t.name);
    }
    return out;
}

}  // namespace

TEST_CASE("tier ids: policy, kind, algorithm, per, and precision, burst or per") {
    auto ps = compile(R"(
upstream: { url: "http://h" }
policies:
  default:
    ip:
      - { limit: 10, per: 1s }
      - { limit: 120, per: 1m, algorithm: fixed }
      - { limit: 40, per: 1s, algorithm: gcra }
      - { limit: 1000, per: 1h, algorithm: log }
      - { limit: 1, per: 7ms, precision: 7ms }
      - { limit: 1000000000, per: 8784h, algorithm: fixed }
    user:
      - { limit: 3, per: 90s, algorithm: gcra, burst: 2 }
)");
    REQUIRE(ps.size() == 1);
    CHECK(ids(ps[0].ip) == std::vector<std::string>{"default/ip/sliding/1s/100ms", "default/ip/fixed/1m/1m",
                                                    "default/ip/gcra/1s/40", "default/ip/log/1h/1h",
                                                    "default/ip/sliding/7ms/7ms", "default/ip/fixed/8784h/8784h"});
    CHECK(ids(ps[0].user) == std::vector<std::string>{"default/user/gcra/90s/2"});
    CHECK(ps[0].ip[0].key == limit::tier_key_of("default/ip/sliding/1s/100ms"));
}

TEST_CASE("tier ids do not change with limit or min_interval, so a reload keeps the counts") {
    auto before = compile(R"(
upstream: { url: "http://h" }
policies: { p: { ip: [ { limit: 10, per: 1s } ] } }
)");
    auto after = compile(R"(
upstream: { url: "http://h" }
policies: { p: { ip: [ { limit: 50, per: 1s, min_interval: 10ms } ] } }
)");
    CHECK(before.at(0).ip.at(0).key == after.at(0).ip.at(0).key);
    CHECK(before.at(0).ip.at(0).limit != after.at(0).ip.at(0).limit);
}

TEST_CASE("tier names are <kind>-<per>, made unique within the policy") {
    auto ps = compile(R"(
upstream: { url: "http://h" }
policies:
  p:
    ip:
      - { limit: 10, per: 1s }
      - { limit: 20, per: 1s, precision: 500ms }
      - { limit: 30, per: 1s, precision: 250ms }
      - { limit: 5, per: 1s, algorithm: gcra }
      - { limit: 100, per: 1m }
    user:
      - { limit: 10, per: 1s }
  q:
    ip:
      - { limit: 10, per: 1s }
      - { limit: 10, per: 1h }
)");
    REQUIRE(ps.size() == 2);
    CHECK(names(ps[0]) == std::vector<std::string>{"ip-1s-sliding", "ip-1s-sliding-2", "ip-1s-sliding-3", "ip-1s-gcra",
                                                   "ip-1m", "user-1s"});
    CHECK(names(ps[1]) == std::vector<std::string>{"ip-1s", "ip-1h"});
}

TEST_CASE("config::shares_counter holds exactly when two tiers would get one id") {
    std::vector<config::tier_config> tiers;
    for (const auto algo :
         {config::algorithm::fixed, config::algorithm::sliding, config::algorithm::gcra, config::algorithm::log}) {
        for (const auto per : {config::duration{1000}, config::duration{60000}}) {
            for (const std::int64_t limit : {10, 20}) {
                config::tier_config t;
                t.kind = "ip";
                t.algo = algo;
                t.per = per;
                t.limit = limit;
                if (algo == config::algorithm::fixed) t.precision = per;
                if (algo == config::algorithm::sliding) t.precision = per / (limit == 10 ? 10 : 5);
                if (algo == config::algorithm::gcra) t.burst = limit;
                tiers.push_back(t);
                t.kind = "user";
                tiers.push_back(t);
                if (algo != config::algorithm::fixed) continue;
                t.window_offset = config::duration{-per.count() / 2};
                tiers.push_back(t);
                t.window_offset = config::duration{0};
                t.month = true;
                t.per = t.precision = std::chrono::hours(31 * 24);
                tiers.push_back(t);
            }
        }
    }
    int shared = 0;
    for (const auto& a : tiers) {
        for (const auto& b : tiers) {
            const bool same_id = limit::tier_id("p", a) == limit::tier_id("p", b);
            CHECK(config::shares_counter(a, b) == same_id);
            shared += same_id && !(a == b);
        }
    }
    CHECK(shared > 0);  // fixed and log tiers that differ only in limit share an id
}

TEST_CASE("plans: a policy with user: plan holds each plan's user tiers, ids and names carrying the plan") {
    auto ps = compile(R"(
upstream: { url: "http://h" }
clients: { user: { api_key_header: X-API-Key } }
plans:
  free: { user: [ {limit: 100, per: 1d, algorithm: fixed}, {limit: 5, per: 1s} ] }
  pro:  { user: [ {limit: 10000, per: 1d, algorithm: fixed} ] }
policies:
  api:
    ip: [ {limit: 50, per: 1s} ]
    user: plan
  plain:
    user: [ {limit: 7, per: 1s} ]
)");
    REQUIRE(ps.size() == 2);
    const auto& api = ps[0];
    CHECK(api.user_by_plan);
    CHECK(api.user.empty());
    CHECK(ids(api.ip) == std::vector<std::string>{"api/ip/sliding/1s/100ms"});
    REQUIRE(api.plan_user("free") != nullptr);
    REQUIRE(api.plan_user("pro") != nullptr);
    CHECK(api.plan_user("gold") == nullptr);
    CHECK(api.plan_user("") == nullptr);
    CHECK(ids(*api.plan_user("free")) ==
          std::vector<std::string>{"api@free/user/fixed/24h/24h", "api@free/user/sliding/1s/100ms"});
    CHECK(ids(*api.plan_user("pro")) == std::vector<std::string>{"api@pro/user/fixed/24h/24h"});
    // The same tier on two plans counts in two places: moving plans starts the new counts.
    CHECK(api.plan_user("free")->at(0).key != api.plan_user("pro")->at(0).key);
    std::vector<std::string> free_names;
    for (const auto& t : *api.plan_user("free")) free_names.push_back(t.name);
    CHECK(free_names == std::vector<std::string>{"free-user-24h", "free-user-1s"});
    CHECK(api.plan_user("pro")->at(0).limit == 10000);
    CHECK_FALSE(ps[1].user_by_plan);
    CHECK(ps[1].plans.empty());
}

TEST_CASE("calendar tiers: per: month and window_offset are in the id and the name") {
    auto ps = compile(R"(
upstream: { url: "http://h" }
policies:
  quota:
    user:
      - {limit: 100000, per: month, algorithm: fixed}
      - {limit: 90000, per: month, algorithm: fixed, window_offset: -5h}
      - {limit: 5000, per: 1d, algorithm: fixed, window_offset: 90m}
      - {limit: 4000, per: 1d, algorithm: fixed}
)");
    REQUIRE(ps.size() == 1);
    CHECK(ids(ps[0].user) == std::vector<std::string>{"quota/user/fixed/month/month",
                                                      "quota/user/fixed/month/month/-5h",
                                                      "quota/user/fixed/24h/24h/+90m", "quota/user/fixed/24h/24h"});
    CHECK(names(ps[0]) ==
          std::vector<std::string>{"user-month-fixed", "user-month-fixed-2", "user-24h-fixed", "user-24h-fixed-2"});
    CHECK(ps[0].user[0].month);
    CHECK(ps[0].user[1].offset == -5 * 3'600'000'000LL);
    CHECK(ps[0].user[2].offset == 90 * 60'000'000LL);
}

TEST_CASE("concurrency tiers: one counter per kind whatever the lease, named <kind>-concurrency") {
    auto ps = compile(R"(
upstream: { url: "http://h" }
policies:
  api:
    ip: [ {concurrency: 10}, {limit: 100, per: 1s} ]
    user: [ {concurrency: 3, lease: 10s} ]
)");
    REQUIRE(ps.size() == 1);
    CHECK(ids(ps[0].ip) == std::vector<std::string>{"api/ip/concurrency", "api/ip/sliding/1s/100ms"});
    CHECK(ids(ps[0].user) == std::vector<std::string>{"api/user/concurrency"});
    CHECK(names(ps[0]) == std::vector<std::string>{"ip-concurrency", "ip-1s", "user-concurrency"});
    CHECK(ps[0].ip[0].algo == config::algorithm::concurrency);
    CHECK(ps[0].ip[0].limit == 10);
    CHECK(ps[0].ip[0].per == 30'000'000);  // the default lease
    CHECK(ps[0].user[0].per == 10'000'000);
    CHECK(ps[0].user[0].horizon == 10'000'000);
    CHECK(ps[0].concurrent);
    CHECK_FALSE(
        compile("upstream: { url: \"http://h\" }\npolicies:\n  p:\n    ip: [ {limit: 1, per: 1s} ]\n")[0].concurrent);
}
