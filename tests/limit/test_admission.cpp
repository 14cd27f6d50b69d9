// The limit phase (limit/admission.hpp): prepare() turns the caller and the policy into the
// store request (keyed hashes, cached per connection and per config generation); conclude()
// turns the store's answer into the outcome, the rate-limit fields and metrics.
#include "limit/admission.hpp"

#include "limit/rate_limit_fields.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>

namespace {

namespace identity = sluice::identity;
namespace limit = sluice::limit;
namespace config = sluice::config;
using limit::outcome;
using style = config::response_config::header_style;
using on_error = config::store_config::failure_mode;

constexpr limit::usec SEC = 1'000'000;

limit::tier make_tier(const std::string& policy, const std::string& kind, std::int64_t n, std::int64_t per_ms) {
    config::tier_config c;
    std::string id = policy + "/" + kind + "/fixed/" + std::to_string(per_ms) + "ms/" + std::to_string(per_ms) + "ms";
    std::string name = kind + "-" + std::to_string(per_ms) + "ms";
    c.kind = kind;
    c.limit = n;
    c.per = config::duration{per_ms};
    c.algo = config::algorithm::fixed;
    c.precision = c.per;
    return limit::tier::from(c, id, name);
}

limit::policy make_policy(const std::string& name, bool ip, bool user, bool shadow = false) {
    limit::policy p;
    p.name = name;
    p.shadow = shadow;
    if (ip) {
        p.ip.push_back(make_tier(name, "ip", 10, 1000));
        p.ip.push_back(make_tier(name, "ip", 100, 60'000));
    }
    if (user) p.user.push_back(make_tier(name, "user", 1000, 3'600'000));
    return p;
}

// A caller as the identify phase finds it: a client address, and the user an API key
// names ("key:<key>", "" = none) with its plan ("" = none).
identity::caller caller_at(const char* ip, std::string user = {}, std::string plan = {}) {
    identity::caller c;
    c.client = boost::asio::ip::make_address(ip);
    c.user = std::move(user);
    c.plan = std::move(plan);
    return c;
}

identity::caller allow_listed(const char* ip, std::string user) {
    auto c = caller_at(ip, std::move(user));
    c.allow_listed = true;
    return c;
}

std::string text(limit::decision_kind d) { return to_string(d); }

// One config snapshot's view: the client settings and a hasher.
struct snapshot {
    config::clients_config cfg;
    identity::hasher hasher;
    limit::admission_context ctx;

    explicit snapshot(std::string secret, on_error e = on_error::allow, style s = style::ietf)
        : hasher(std::move(secret)), ctx{cfg.ipv6_prefix, hasher, next_generation(), e, s} {}

    static std::uint64_t next_generation() {
        static std::uint64_t last = 0;
        return ++last;
    }
    limit::digest ip_hash(const char* ip) const {
        return hasher.hash("ip", identity::ip_identifier(boost::asio::ip::make_address(ip), cfg.ipv6_prefix));
    }
};

// A counter or gauge line of the scrape ("name{labels} value"), or "(absent)".
std::string metric(sluice::metrics::registry& r, const std::string& name_and_labels) {
    std::istringstream in(r.scrape());
    for (std::string line; std::getline(in, line);)
        if (line.rfind(name_and_labels + " ", 0) == 0) return line.substr(name_and_labels.size() + 1);
    return "(absent)";
}

// A store answer over the policy's tiers: every tier with `remaining` left and a reset of 30 s.
limit::check_result answer(const limit::policy& p, bool allowed, std::int64_t remaining, limit::usec retry_after) {
    limit::check_result r;
    r.verdict.allowed = allowed;
    r.verdict.retry_after = retry_after;
    for (const auto& t : p.ip) r.verdict.tiers.push_back({&t, 0, remaining, 30 * SEC, allowed});
    return r;
}

}  // namespace

TEST_CASE("admission::prepare: an allow-listed caller bypasses every limit") {
    snapshot s("secret-1");
    auto p = make_policy("default", true, true);
    limit::admission a;
    outcome out;
    CHECK_FALSE(a.prepare(s.ctx, p, 1, allow_listed("192.0.2.7", "key:k1"), out));
    CHECK(out.what == outcome::kind::pass);
    CHECK(text(out.decision) == "bypass");
    CHECK(out.id_kind == std::nullopt);
    CHECK(out.fields.empty());
}

TEST_CASE("admission::prepare: ip tiers only: one key, the keyed hash of the client address") {
    snapshot s("secret-1");
    auto p = make_policy("default", true, false);
    limit::admission a;
    outcome out;
    REQUIRE(a.prepare(s.ctx, p, 3, caller_at("192.0.2.7"), out));
    const auto& r = a.request();
    CHECK(r.cost == 3);
    REQUIRE(r.keys.size() == 1);
    CHECK(r.keys[0].kind == sluice::identity::kind::ip);
    CHECK(r.keys[0].id == s.ip_hash("192.0.2.7"));
    CHECK(r.keys[0].tiers.data() == p.ip.data());
    CHECK(r.keys[0].tiers.size() == p.ip.size());
    CHECK(out.id_kind == identity::kind::ip);
    CHECK(out.id == r.keys[0].id);
    CHECK(text(out.decision) == "none");  // decided later, in conclude()

    // IPv6 clients are limited per prefix (clients.ipv6_prefix, 64 by default).
    outcome out6;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("2001:db8:1:2::5"), out6));
    const auto v6 = a.request().keys[0].id;
    outcome same_net;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("2001:db8:1:2:ffff::9"), same_net));
    CHECK(a.request().keys[0].id == v6);
    CHECK(v6 != s.ip_hash("192.0.2.7"));

    // A policy with user tiers only, and no user source: nothing to limit.
    auto user_only = make_policy("user-only", false, true);
    outcome none;
    CHECK_FALSE(a.prepare(s.ctx, user_only, 1, caller_at("192.0.2.7"), none));
    CHECK(none.what == outcome::kind::pass);
    CHECK(none.id_kind == std::nullopt);
}

TEST_CASE("admission::prepare: a user from an API key adds a user key after the ip key") {
    snapshot s("secret-1");
    auto p = make_policy("default", true, true);
    limit::admission a;
    outcome out;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), out));
    auto keys = a.request().keys;
    REQUIRE(keys.size() == 2);
    CHECK(keys[0].kind == sluice::identity::kind::ip);
    CHECK(keys[0].id == s.ip_hash("192.0.2.7"));
    CHECK(keys[1].kind == sluice::identity::kind::user);
    CHECK(keys[1].id == s.hasher.hash("user", "key:k1"));
    CHECK(keys[1].tiers.data() == p.user.data());
    CHECK(out.id_kind == identity::kind::user);  // the access log names the user
    CHECK(out.id == keys[1].id);

    // Another key is another user; no key is no user key.
    outcome other;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7", "key:k2"), other));
    REQUIRE(a.request().keys.size() == 2);
    CHECK(a.request().keys[1].id == s.hasher.hash("user", "key:k2"));
    outcome anonymous;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7"), anonymous));
    REQUIRE(a.request().keys.size() == 1);
    CHECK(anonymous.id_kind == identity::kind::ip);

    // A user under a policy without user tiers is limited by address only.
    auto ip_only = make_policy("ip-only", true, false);
    outcome o;
    REQUIRE(a.prepare(s.ctx, ip_only, 1, caller_at("192.0.2.7", "key:k1"), o));
    CHECK(a.request().keys.size() == 1);

    // And under a policy with user tiers only, the user key alone.
    auto user_only = make_policy("user-only", false, true);
    outcome u;
    REQUIRE(a.prepare(s.ctx, user_only, 1, caller_at("192.0.2.7", "key:k1"), u));
    REQUIRE(a.request().keys.size() == 1);
    CHECK(a.request().keys[0].kind == sluice::identity::kind::user);
    CHECK(a.request().keys[0].id == s.hasher.hash("user", "key:k1"));
}

// The caller's plan is the one its key or JWT names, or clients.user.default_plan: the
// identify phase chooses (tests/identity/test_identify.cpp).
TEST_CASE("admission::prepare: user: plan takes the caller's plan's tiers, and none at all is a 403") {
    snapshot s("secret-1");
    auto p = make_policy("api", true, false);
    p.user_by_plan = true;
    p.plans.push_back({"pro", {make_tier("api@pro", "user", 500, 3'600'000)}});
    limit::admission a;

    // An unregistered key names no plan, and there is no default_plan.
    outcome none;
    CHECK_FALSE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), none));
    CHECK(none.what == outcome::kind::forbidden);
    CHECK(text(none.decision) == "forbidden");
    CHECK(none.reason.find("default_plan") != std::string::npos);

    // A shadow policy refuses no one: the address tiers alone are evaluated.
    auto shadow = p;
    shadow.shadow = true;
    outcome shadowed;
    REQUIRE(a.prepare(s.ctx, shadow, 1, caller_at("192.0.2.7", "key:k1"), shadowed));
    CHECK(shadowed.what == outcome::kind::pass);
    CHECK(a.request().keys.size() == 1);

    // Anonymous callers are limited by address as before.
    outcome anonymous;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7"), anonymous));
    CHECK(a.request().keys.size() == 1);

    outcome pro;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7", "key:k1", "pro"), pro));
    REQUIRE(a.request().keys.size() == 2);
    CHECK(a.request().keys[1].tiers.data() == p.plans[0].user.data());

    // (the config refuses a default_plan no plan has; a policy without the plan still answers 403)
    outcome gold;
    CHECK_FALSE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7", "key:k1", "gold"), gold));
    CHECK(gold.what == outcome::kind::forbidden);
    CHECK(gold.reason == "unknown plan");
}

TEST_CASE("admission::prepare: hashes are cached per connection and redone for a new client") {
    snapshot s("secret-1");
    snapshot other_secret("secret-2");
    auto p = make_policy("default", true, true);
    limit::admission a;
    outcome o1, o2, o3;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), o1));
    const auto ip1 = a.request().keys[0].id, user1 = a.request().keys[1].id;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), o2));
    CHECK(a.request().keys[0].id == ip1);
    CHECK(a.request().keys[1].id == user1);

    // The same generation with another hasher: the cache answers (nothing was rehashed).
    limit::admission_context same_generation = other_secret.ctx;
    same_generation.generation = s.ctx.generation;
    REQUIRE(a.prepare(same_generation, p, 1, caller_at("192.0.2.7", "key:k1"), o3));
    CHECK(a.request().keys[0].id == ip1);
    CHECK(a.request().keys[1].id == user1);

    // A new client address is hashed afresh.
    outcome o4;
    REQUIRE(a.prepare(s.ctx, p, 1, caller_at("192.0.2.8", "key:k1"), o4));
    CHECK(a.request().keys[0].id == s.ip_hash("192.0.2.8"));
    CHECK(a.request().keys[0].id != ip1);
}

// A regression test: the ip and user caches once shared one generation, which the ip branch
// moved on before the user branch compared against it, so the user kept the old snapshot's
// hash. A request that skips a branch must not leave that branch's cache stale either (the
// last two blocks).
TEST_CASE("admission::prepare: a new config generation drops the cached ip AND user hashes") {
    snapshot before("secret-1");
    snapshot after("secret-2");
    REQUIRE(before.ctx.generation != after.ctx.generation);
    auto p = make_policy("default", true, true);
    limit::admission a;
    outcome o1, o2;
    REQUIRE(a.prepare(before.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), o1));
    CHECK(a.request().keys[1].id == before.hasher.hash("user", "key:k1"));

    REQUIRE(a.prepare(after.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), o2));
    REQUIRE(a.request().keys.size() == 2);
    CHECK(a.request().keys[0].id == after.ip_hash("192.0.2.7"));
    CHECK(a.request().keys[1].id == after.hasher.hash("user", "key:k1"));
    CHECK(o2.id == after.hasher.hash("user", "key:k1"));

    // Without ip tiers the user hash follows the generation too.
    auto user_only = make_policy("user-only", false, true);
    limit::admission b;
    outcome o3, o4;
    REQUIRE(b.prepare(before.ctx, user_only, 1, caller_at("192.0.2.7", "key:k1"), o3));
    REQUIRE(b.prepare(after.ctx, user_only, 1, caller_at("192.0.2.7", "key:k1"), o4));
    CHECK(b.request().keys[0].id == after.hasher.hash("user", "key:k1"));

    // The first request after the reload names no user; the next one does.
    limit::admission c;
    outcome o5, o6, o7;
    REQUIRE(c.prepare(before.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), o5));
    REQUIRE(c.prepare(after.ctx, p, 1, caller_at("192.0.2.7"), o6));
    REQUIRE(c.prepare(after.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), o7));
    REQUIRE(c.request().keys.size() == 2);
    CHECK(c.request().keys[1].id == after.hasher.hash("user", "key:k1"));

    // The first request after the reload has no ip tiers; the next one has.
    limit::admission d;
    outcome o8, o9, o10;
    REQUIRE(d.prepare(before.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), o8));
    REQUIRE(d.prepare(after.ctx, user_only, 1, caller_at("192.0.2.7", "key:k1"), o9));
    REQUIRE(d.prepare(after.ctx, p, 1, caller_at("192.0.2.7", "key:k1"), o10));
    REQUIRE(d.request().keys.size() == 2);
    CHECK(d.request().keys[0].id == after.ip_hash("192.0.2.7"));
    CHECK(d.request().keys[1].id == after.hasher.hash("user", "key:k1"));
}

TEST_CASE("admission::conclude: allowed, denied and shadow verdicts") {
    sluice::metrics::registry reg(1);
    snapshot s("secret-1");
    auto p = make_policy("default", true, false);
    p.metric_slot = reg.slot("policy", p.name);
    auto shadow = make_policy("login", true, false, true);
    shadow.metric_slot = reg.slot("policy", shadow.name);
    limit::admission a;
    const std::string decisions = "sluice_rate_limit_decisions_total";

    SUBCASE("allowed: pass, with the rate-limit fields of the verdict") {
        outcome out;
        auto r = answer(p, true, 4, 0);
        a.conclude(s.ctx, p, r, reg.worker(0), out);
        CHECK(out.what == outcome::kind::pass);
        CHECK(text(out.decision) == "allowed");
        CHECK(out.retry_after_s == 0);
        std::string expected;
        limit::append_rate_limit_fields(expected, r.verdict, style::ietf);
        CHECK_FALSE(expected.empty());
        CHECK(out.fields == expected);
        CHECK(metric(reg, decisions + "{policy=\"default\",result=\"allowed\",listener=\"proxy\"}") == "1");
        CHECK(metric(reg, decisions + "{policy=\"default\",result=\"limited\",listener=\"proxy\"}") == "0");
    }
    SUBCASE("denied: limited, with Retry-After's seconds and the fields") {
        outcome out;
        auto r = answer(p, false, 0, 2 * SEC + 500'000);
        a.conclude(s.ctx, p, r, reg.worker(0), out);
        CHECK(out.what == outcome::kind::limited);
        CHECK(text(out.decision) == "limited");
        CHECK(out.retry_after_s == limit::retry_after_seconds(r.verdict));
        CHECK(out.retry_after_s >= 3);  // 2.5 s rounds up (and the 30 s reset may raise it)
        CHECK(out.fields.find("RateLimit: ") != std::string::npos);
        CHECK(metric(reg, decisions + "{policy=\"default\",result=\"limited\",listener=\"proxy\"}") == "1");
    }
    SUBCASE("legacy headers follow the context's style") {
        limit::admission_context legacy = s.ctx;
        legacy.headers = style::legacy;
        outcome out;
        a.conclude(legacy, p, answer(p, true, 4, 0), reg.worker(0), out);
        CHECK(out.fields.find("X-RateLimit-Remaining: 4\r\n") != std::string::npos);
        CHECK(out.fields.find("RateLimit-Policy") == std::string::npos);
        limit::admission_context none = s.ctx;
        none.headers = style::none;
        outcome quiet;
        a.conclude(none, p, answer(p, true, 4, 0), reg.worker(0), quiet);
        CHECK(quiet.fields.empty());
    }
    SUBCASE("shadow: a denial passes and stays invisible to the client, but is counted") {
        outcome out;
        a.conclude(s.ctx, shadow, answer(shadow, false, 0, 5 * SEC), reg.worker(0), out);
        CHECK(out.what == outcome::kind::pass);
        CHECK(text(out.decision) == "shadow_limited");
        CHECK(out.retry_after_s == 0);
        CHECK(out.fields.empty());
        CHECK(metric(reg, decisions + "{policy=\"login\",result=\"shadow_limited\",listener=\"proxy\"}") == "1");
        CHECK(metric(reg, decisions + "{policy=\"login\",result=\"limited\",listener=\"proxy\"}") == "0");
        outcome allowed;
        a.conclude(s.ctx, shadow, answer(shadow, true, 3, 0), reg.worker(0), allowed);
        CHECK(text(allowed.decision) == "allowed");
        CHECK(allowed.fields.empty());
    }
}

TEST_CASE("admission::conclude: a store error passes under on_error allow and is store_down under deny") {
    sluice::metrics::registry reg(1);
    auto p = make_policy("default", true, false);
    p.metric_slot = reg.slot("policy", p.name);
    limit::check_result failed;
    failed.state = limit::check_result::status::error;
    failed.error = "timeout";
    limit::admission a;

    snapshot open("secret-1", on_error::allow);
    outcome out;
    a.conclude(open.ctx, p, failed, reg.worker(0), out);
    CHECK(out.what == outcome::kind::pass);
    CHECK(text(out.decision) == "store_error");
    CHECK(out.fields.empty());
    CHECK(metric(reg, "sluice_store_errors_total") == "1");

    snapshot closed("secret-1", on_error::deny);
    outcome denied;
    a.conclude(closed.ctx, p, failed, reg.worker(0), denied);
    CHECK(denied.what == outcome::kind::store_down);
    CHECK(text(denied.decision) == "store_error");
    CHECK(denied.fields.empty());
    CHECK(metric(reg, "sluice_store_errors_total") == "2");
    CHECK(metric(reg, "sluice_rate_limit_decisions_total{policy=\"default\",result=\"allowed\",listener=\"proxy\"}") ==
          "0");

    // reset() makes the outcome a pass again for the connection's next request.
    denied.reset();
    CHECK(denied.what == outcome::kind::pass);
    CHECK(text(denied.decision) == "none");
}
