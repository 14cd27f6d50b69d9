// routes[].charge at load: on_status and refund_on, what they charge, and each error at its
// key as FILE:LINE:COLUMN: path: reason.
#include <doctest/doctest.h>

#include <string>

#include "config/config.hpp"
#include "load_error.hpp"

namespace cfg = sluice::config;
using sluice::config::testing::error_of;

namespace {

// A config whose one route (line 4) has `policy` and the keys `keys`.
std::string route_yaml(const std::string& keys, const std::string& policy = "p") {
    return "upstream: { url: 'http://127.0.0.1:3000' }\n"
           "policies: { p: { ip: [ {limit: 5, per: 1m} ] } }\n"
           "routes:\n"
           "  - { match: { path: /login }, policy: " +
           policy + ", " + keys + " }\n";
}

std::optional<cfg::charge_config> charge_of(const std::string& keys) {
    return cfg::load_string(route_yaml(keys), "inline.yaml")->routes.front().charge;
}

// The error of route_yaml(keys), expected at `needle` on line 4 with `path` and `reason`.
void check_error(const std::string& keys, const std::string& needle, const std::string& path, const std::string& reason,
                 const std::string& policy = "p") {
    const auto yaml = route_yaml(keys, policy);
    CAPTURE(yaml);
    const auto line = yaml.substr(yaml.rfind('\n', yaml.size() - 2) + 1);
    const auto col = line.find(needle);
    REQUIRE(col != std::string::npos);
    CHECK(error_of(yaml) == "inline.yaml:4:" + std::to_string(col + 1) + ": " + path + ": " + reason);
}

}  // namespace

TEST_CASE("routes[].charge: unset charges every admitted request") { CHECK_FALSE(charge_of("cost: 1").has_value()); }

TEST_CASE("routes[].charge.on_status: charged only with these statuses") {
    const auto c = charge_of("charge: { on_status: [401, 403] }");
    REQUIRE(c);
    REQUIRE(c->on_status);
    CHECK(*c->on_status == cfg::status_set{{{401, 401}, {403, 403}}});
    CHECK(c->refund_on.ranges.empty());
    CHECK(c->charged(401));
    CHECK(c->charged(403));
    CHECK_FALSE(c->charged(200));
    CHECK_FALSE(c->charged(402));
    CHECK_FALSE(c->charged(502));
    CHECK(charge_of("charge: { on_status: 4xx }")->charged(429));
    CHECK(charge_of("charge: { on_status: '401' }")->charged(401));
}

TEST_CASE("routes[].charge.refund_on: never charged with these, any other status is") {
    const auto c = charge_of("charge: { refund_on: [5xx] }");
    REQUIRE(c);
    CHECK_FALSE(c->on_status);
    CHECK(c->refund_on == cfg::status_set{{{500, 599}}});
    CHECK(c->charged(200));
    CHECK(c->charged(101));
    CHECK(c->charged(404));
    CHECK_FALSE(c->charged(500));
    CHECK_FALSE(c->charged(503));
}

TEST_CASE("routes[].charge: both keys, refund_on winning over on_status") {
    const auto c = charge_of("charge: { on_status: 4xx, refund_on: [429, 5xx] }");
    REQUIRE(c);
    CHECK(c->charged(401));
    CHECK_FALSE(c->charged(429));
    CHECK_FALSE(c->charged(200));
    CHECK_FALSE(c->charged(502));
}

TEST_CASE("routes[].charge: with cost_header, and with a policy that has plans") {
    const auto c =
        cfg::load_string(route_yaml("cost_header: X-Cost, max_cost: 5, charge: { refund_on: 5xx }"), "inline.yaml");
    CHECK(c->routes.front().cost_header == "X-Cost");
    CHECK(c->routes.front().charge->refund_on.contains(500));
}

TEST_CASE("routes[].charge: errors at their key") {
    const std::string bad = "expected a status like 200, a class like 5xx, or a list of them";
    check_error("charge: { on_status: [401] }", "charge", "routes[0].charge",
                "charge needs a route with a policy (not none)", "none");
    check_error("charge: {}", "{}", "routes[0].charge", "expected on_status, refund_on or both");
    check_error("charge: { on_status: [] }", "[]", "routes[0].charge.on_status", "must not be empty");
    check_error("charge: { refund_on: [] }", "[]", "routes[0].charge.refund_on", "must not be empty");
    check_error("charge: { on_status: 600 }", "600", "routes[0].charge.on_status", "must be between 100 and 599");
    check_error("charge: { on_status: 1xx }", "1xx", "routes[0].charge.on_status", bad);
    check_error("charge: { refund_on: [500, 6xx] }", "6xx", "routes[0].charge.refund_on[1]", bad);
    check_error("charge: { refund_on: failures }", "failures", "routes[0].charge.refund_on", bad);
    check_error("charge: { on_status: {a: 1} }", "{a", "routes[0].charge.on_status", bad);
    check_error("charge: { on_status: [401], refund_on: 4xx }", "4xx", "routes[0].charge.refund_on",
                "refunds every status on_status charges: no request would ever be charged");
    check_error("charge: { on_status: 401, refund: 5xx }", "refund", "routes[0].charge.refund", "unknown key");
    check_error("charge: on", "on }", "routes[0].charge", "expected a mapping");
}
