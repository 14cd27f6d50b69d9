// The admin's blocks and overrides (limit/controls.hpp): how a record is stored and read
// back, what a snapshot keeps of them, and what they make of one request.
#include "limit/controls.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

namespace limit = sluice::limit;
using limit::control_record;
using limit::control_step;
using limit::controls;

limit::digest id_of(std::uint8_t b) {
    limit::digest d{};
    d.fill(b);
    return d;
}

control_record block(const std::string& kind, std::uint8_t id, std::int64_t until) {
    control_record r;
    r.what = control_record::type::block;
    r.kind = kind;
    r.id = id_of(id);
    r.at_ms = 1000;
    r.until_ms = until;
    return r;
}

control_record override_tiers(const std::string& kind, std::uint8_t id, const std::string& policy,
                              const std::string& tiers, std::int64_t until) {
    control_record r;
    r.what = control_record::type::override_tiers;
    r.kind = kind;
    r.id = id_of(id);
    r.policy = policy;
    r.tiers = tiers;
    r.at_ms = 1000;
    r.until_ms = until;
    return r;
}

const limit::policy& api_policy() {
    static const auto cfg = sluice::config::load_string(R"(
upstream: { url: "http://127.0.0.1:9" }
clients: { user: { api_key_header: X-Key } }
policies:
  api: { ip: [ {limit: 10, per: 1m} ], user: [ {limit: 20, per: 1h} ] }
  web: { ip: [ {limit: 99, per: 1m} ] }
routes: [ { match: { path_prefix: / }, policy: api } ]
)",
                                                        "controls.yaml");
    static const auto policies = limit::compile_policies(*cfg);
    return policies.front();
}

}  // namespace

TEST_CASE("controls: a record's field and value, read back") {
    const auto b = block("header:x-tenant+ip", 0xab, 5000);
    CHECK(b.field() == "b:abababababababababababababababab:header:x-tenant+ip");
    CHECK(b.value() == R"({"at":1000,"until":5000})");
    const auto o = override_tiers("ip", 1, "api", R"([{"limit":2,"per":"1m"}])", 9000);
    CHECK(o.field() == "o:01010101010101010101010101010101:api:ip");
    CHECK(o.value() == R"({"at":1000,"until":9000,"tiers":[{"limit":2,"per":"1m"}]})");
    control_record p;
    p.what = control_record::type::override_plan;
    p.kind = "user";
    p.id = id_of(2);
    p.plan = "pro";
    p.until_ms = 7;
    CHECK(p.field() == "o:02020202020202020202020202020202:@:user");

    for (const auto& r : {b, o, p}) {
        const auto back = control_record::parse(r.field(), r.value());
        REQUIRE(back);
        CHECK(back->what == r.what);
        CHECK(back->kind == r.kind);
        CHECK(back->id == r.id);
        CHECK(back->policy == r.policy);
        CHECK(back->plan == r.plan);
        CHECK(back->tiers == r.tiers);
        CHECK(back->until_ms == r.until_ms);
    }
    // Another shape: skipped, never misread.
    CHECK_FALSE(control_record::parse("x:01010101010101010101010101010101:ip", b.value()));
    CHECK_FALSE(control_record::parse("b:0101:ip", b.value()));
    CHECK_FALSE(control_record::parse("b:0101010101010101010101010101010G:ip", b.value()));
    CHECK_FALSE(control_record::parse(b.field(), "{\"until\":5}"));
    CHECK_FALSE(control_record::parse(b.field(), "not json"));
    CHECK_FALSE(control_record::parse("o:01010101010101010101010101010101:api:ip", R"({"at":1,"until":2})"));
    CHECK_FALSE(control_record::parse("b:01010101010101010101010101010101:", b.value()));
}

TEST_CASE("controls: a snapshot leaves out what ended and what it cannot read, and says why") {
    std::vector<std::string> skipped;
    const auto c = controls::build({block("ip", 1, 5000), block("ip", 2, 900), block("Header:X", 3, 5000),
                                    override_tiers("ip", 4, "api", R"([{"limit":0,"per":"1m"}])", 5000),
                                    override_tiers("ip", 5, "api", R"([{"limit":3,"per":"1m"}])", 4000)},
                                   1000, &skipped);
    CHECK(c->blocks() == 1);
    CHECK(c->overrides() == 1);
    CHECK(c->next_end_ms() == 4000);
    CHECK(c->find(sluice::identity::kind::ip, id_of(1))->block_until_ms == 5000);
    CHECK(c->find(sluice::identity::kind::ip, id_of(2)) == nullptr);  // ended
    CHECK(c->find(sluice::identity::kind::user, id_of(1)) == nullptr);
    REQUIRE(skipped.size() == 2);
    CHECK(skipped[0].ends_with(": not a kind"));
    CHECK(skipped[1].find("[0].limit: must be between 1 and") != std::string::npos);
    const auto* o = c->find(sluice::identity::kind::ip, id_of(5));
    REQUIRE(o);
    REQUIRE(o->overrides.size() == 1);
    CHECK(o->overrides[0].tiers.at(0).id == "api!1000/ip/sliding/1m/6s");  // counts of its own
    CHECK(o->overrides[0].tiers.at(0).name == "ip-1m");
    CHECK(o->overrides[0].tiers.at(0).limit == 3);
    CHECK_FALSE(c->has_plans());
    CHECK(controls::build({}, 0)->empty());
}

TEST_CASE("controls: a request blocked, overridden in its policy only, and a plan for a user") {
    const auto& p = api_policy();
    std::vector<limit::store_key> keys{{sluice::identity::kind::ip, id_of(1), p.ip},
                                       {sluice::identity::kind::user, id_of(2), p.user}};
    const limit::check_request r{keys, 1};
    limit::lease_ids leases;
    control_step step;

    auto none = controls::build({block("ip", 9, 5000)}, 1000);
    CHECK(step.apply(*none, p, r, 1000, &leases) == control_step::result::none);

    auto blocked = controls::build({block("user", 2, 5000)}, 1000);
    CHECK(step.apply(*blocked, p, r, 1000, &leases) == control_step::result::blocked);
    CHECK(step.blocked_key() == 1);
    CHECK(step.blocked_until_ms() == 5000);
    CHECK(step.apply(*blocked, p, r, 5000, &leases) == control_step::result::none);  // ended

    auto c = controls::build({override_tiers("ip", 1, "api", R"([{"concurrency":2}])", 5000),
                              override_tiers("user", 2, "web", R"([{"limit":1,"per":"1m"}])", 5000)},
                             1000);
    REQUIRE(step.apply(*c, p, r, 2000, &leases) == control_step::result::overridden);
    const auto& out = step.request();
    REQUIRE(out.keys.size() == 2);
    CHECK(out.keys[0].tiers.size() == 1);
    CHECK(out.keys[0].tiers[0].algo == sluice::config::algorithm::concurrency);
    CHECK(out.keys[1].tiers.data() == p.user.data());  // web's override is not api's
    CHECK(out.lease != 0);                             // a slot to take: a lease drawn
    CHECK(r.keys[0].tiers.data() == p.ip.data());      // the request itself is untouched

    control_record plan;
    plan.what = control_record::type::override_plan;
    plan.kind = "user";
    plan.id = id_of(2);
    plan.plan = "pro";
    plan.until_ms = 5000;
    auto plans = controls::build({plan}, 1000);
    CHECK(plans->has_plans());
    REQUIRE(control_step::plan_of(*plans, id_of(2), 1000));
    CHECK(*control_step::plan_of(*plans, id_of(2), 1000) == "pro");
    CHECK_FALSE(control_step::plan_of(*plans, id_of(2), 5000));
    CHECK_FALSE(control_step::plan_of(*plans, id_of(3), 1000));
}
