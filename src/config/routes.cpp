// routes: what a request matches (path, methods, host), the policy it falls under, what it
// costs and the pool it goes to; and, once every policy and plan is read, that each cost fits
// the tiers it meets (upstreams.cpp checks the pools).
#include <algorithm>
#include <array>
#include <sstream>

#include "config/readers.hpp"

namespace sluice::config::detail {

namespace {

std::string read_method(const node_ref& v) { return to_upper(read_checked(v, is_token, bad_method)); }

// Requests are matched on their normalised path without ";params": a route path in any
// other form would never match.
void read_match(const node_ref& n, route_config& r) {
    auto read_path = [&](const node_ref& v, std::string& out) {
        if (!r.path.empty() || !r.path_prefix.empty()) v.fail_at_key(path_and_path_prefix);
        out = read_checked(v, is_route_path, bad_route_path);
        r.path_at = v.where();  // the router checks the path is in its normal form
    };
    read_mapping(n, {
                        {"path", [&](const node_ref& v) { read_path(v, r.path); }},
                        {"path_prefix", [&](const node_ref& v) { read_path(v, r.path_prefix); }},
                        {"methods", [&](const node_ref& v) { r.methods = read_distinct(v, read_method); }},
                        {"host",
                         [&](const node_ref& v) {
                             r.host = to_lower(read_checked(v, is_dns_name, bad_route_host));
                             r.host_at = v.where();
                         }},
                        {"case_insensitive", [&](const node_ref& v) { r.case_insensitive = schema::read_bool(v); }},
                    });
    if (r.path.empty() && r.path_prefix.empty()) n.fail(route_needs_path);
}

// Fields that frame or route a message: a route's cost_header may not name one, since it is
// never relayed.
bool is_framing_field(std::string_view name) {
    static constexpr std::array<std::string_view, 10> framing{
        "content-length", "transfer-encoding", "connection",   "keep-alive", "upgrade", "te",
        "trailer",        "proxy-connection",  "content-type", "via"};
    const std::string lower = to_lower(std::string(name));
    return std::find(framing.begin(), framing.end(), lower) != framing.end();
}

// routes[].charge: on_status, refund_on or both; some status must stay charged.
charge_config read_charge(const node_ref& n) {
    charge_config c;
    std::optional<node_ref> refund_on;
    read_mapping(n, {
                        {"on_status", [&](const node_ref& v) { c.on_status = read_status_set(v); }},
                        {"refund_on",
                         [&](const node_ref& v) {
                             c.refund_on = read_status_set(v);
                             refund_on = v;
                         }},
                    });
    if (!c.on_status && !refund_on) n.fail(charge_needs_a_rule);
    bool some = false;
    for (unsigned status = 100; status <= 599 && !some; ++status) some = c.charged(status);
    if (!some) refund_on->fail(charge_never);
    return c;
}

route_config read_route(const node_ref& n, route_nodes& at) {
    route_config r;
    at.route = n;
    read_mapping(n, {
                        {"match", [&](const node_ref& v) { read_match(v, r); }, presence::required},
                        {"policy",
                         [&](const node_ref& v) {
                             r.policy = v.scalar(expected_policy_name);
                             at.policy = v;
                         },
                         presence::required},
                        {"cost",
                         [&](const node_ref& v) {
                             r.cost = read_count(v);
                             at.cost = v;
                         }},
                        {"name", [&](const node_ref& v) { r.name = read_string(v); }},
                        {"upstream",
                         [&](const node_ref& v) {
                             r.upstream = read_string(v);
                             at.upstream = v;
                         }},
                        {"cost_header",
                         [&](const node_ref& v) {
                             r.cost_header = read_checked(v, is_token, bad_header_name);
                             if (is_framing_field(r.cost_header)) v.fail(cost_header_framing);
                             at.cost_header = v;
                         }},
                        {"max_cost",
                         [&](const node_ref& v) {
                             r.max_cost = read_count(v);
                             at.max_cost = v;
                         }},
                        {"charge",
                         [&](const node_ref& v) {
                             r.charge = read_charge(v);
                             at.charge = v;
                         }},
                    });
    if (r.name.empty()) r.name = r.path.empty() ? r.path_prefix + "*" : r.path;
    if (at.cost_header && !at.max_cost) at.cost_header->fail_at_key(cost_header_needs_max_cost);
    if (at.max_cost && !at.cost_header) at.max_cost->fail_at_key(max_cost_needs_cost_header);
    if (at.max_cost && r.max_cost < r.cost) at.max_cost->fail("must be at least the route's cost");
    return r;
}

std::string cost_exceeds(std::int64_t cost, std::string_view what, std::int64_t bound, const std::string& where,
                         std::size_t index) {
    std::ostringstream s;
    s << "cost " << cost << " exceeds the " << what << ' ' << bound << " of " << where << '[' << index << ']';
    return s.str();
}

// `where`: the tiers' place in the file, "policies.api.ip", "policies.api.header:X-Tenant" or "plans.pro.user".
void check_cost(const node_ref& at, std::int64_t cost, const std::vector<tier_config>& tiers,
                const std::string& where) {
    for (std::size_t i = 0; i < tiers.size(); ++i) {
        const tier_config& t = tiers[i];
        if (t.algo == algorithm::concurrency) continue;  // a request takes one slot, whatever its cost
        if (cost > t.limit) at.fail(cost_exceeds(cost, "limit", t.limit, where, i));
        if (t.algo == algorithm::gcra && cost > t.burst) at.fail(cost_exceeds(cost, "burst", t.burst, where, i));
    }
}

// A cost (a route's, or the most an upstream may report) must fit every tier it may meet.
void check_cost_fits(const config& c, const node_ref& at, std::int64_t cost, const policy_config& p) {
    check_cost(at, cost, p.ip, "policies." + p.name + ".ip");
    check_cost(at, cost, p.user, "policies." + p.name + ".user");
    for (const auto& k : p.kinds) check_cost(at, cost, k.tiers, k.path);
    if (!p.user_by_plan) return;
    for (const auto& plan : c.plans) check_cost(at, cost, plan.user, "plans." + plan.name + ".user");
}

}  // namespace

void read_routes(const node_ref& n, std::vector<route_config>& out, std::vector<route_nodes>& at) {
    schema::read_sequence(n, [&](const node_ref& item) { out.push_back(read_route(item, at.emplace_back())); });
}

void check_routes(const config& c, const std::vector<route_nodes>& at) {
    for (std::size_t i = 0; i < c.routes.size(); ++i) {
        const route_config& r = c.routes[i];
        if (r.policy == "none") {
            if (at[i].cost_header) at[i].cost_header->fail_at_key(cost_header_needs_policy);
            if (at[i].charge) at[i].charge->fail_at_key(charge_needs_policy);
            continue;
        }
        const policy_config* p = c.find_policy(r.policy);
        if (p == nullptr) at[i].policy->fail("no policy named \"" + r.policy + "\"");
        if (at[i].cost) check_cost_fits(c, *at[i].cost, r.cost, *p);
        if (at[i].max_cost) check_cost_fits(c, *at[i].max_cost, r.max_cost, *p);
    }
}

}  // namespace sluice::config::detail
