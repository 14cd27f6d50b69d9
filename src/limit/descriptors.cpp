#include "limit/descriptors.hpp"

#include "limit/policy.hpp"

#include <algorithm>

namespace sluice::limit {

namespace {

// tiers: plan: each plan's user tiers, as the policy named compiled them, else as this node's
// own ("<domain>@<plan>/<kind>/..." ids, "<plan>-<kind>-<per>" names).
void compile_plans(const std::string& domain, const config::config& cfg, std::span<const policy> policies,
                   const config::descriptor_config& c, descriptor_node& n) {
    n.by_plan = true;
    n.kind = identity::kind_of(c.kind);
    if (!c.policy.empty()) {
        n.user_kind = identity::kind::user;
        for (const auto& p : policies)
            if (p.name == c.policy) n.plans = p.plans;
        return;
    }
    n.user_kind = n.kind;
    for (const auto& plan : cfg.plans) {
        auto tiers = plan.user;
        std::vector<const config::tier_config*> list;
        for (auto& t : tiers) {
            t.kind = c.kind;
            list.push_back(&t);
        }
        const auto names = tier_names(list);
        auto& pt = n.plans.emplace_back(plan_tiers{plan.name, {}});
        for (std::size_t i = 0; i < tiers.size(); ++i)
            pt.user.push_back(
                tier::from(tiers[i], tier_id(domain + '@' + plan.name, tiers[i]), plan.name + '-' + names[i]));
    }
}

descriptor_node compile_node(const std::string& domain, const config::config& cfg, std::span<const policy> policies,
                             const config::descriptor_config& c) {
    descriptor_node n;
    n.key = c.key;
    n.value = c.value;
    n.shadow = c.shadow;
    n.prefix = c.value_prefix;
    if (c.by_plan) compile_plans(domain, cfg, policies, c, n);
    std::vector<const config::tier_config*> tiers;
    for (const auto& t : c.tiers) tiers.push_back(&t);
    const auto names = tier_names(tiers);
    for (std::size_t i = 0; i < c.tiers.size(); ++i)
        n.tiers.push_back(tier::from(c.tiers[i], tier_id(domain, c.tiers[i]), names[i]));
    // The kind's text is the tiers' (config/service.cpp writes the path into each); a node
    // without tiers names no identifier.
    if (!c.tiers.empty()) n.kind = identity::kind_of(c.tiers.front().kind);
    for (const auto& child : c.descriptors) n.children.push_back(compile_node(domain, cfg, policies, child));
    return n;
}

const descriptor_node* find_child(const std::vector<descriptor_node>& nodes, const descriptor_entry& e) {
    const descriptor_node* prefix = nullptr;
    const descriptor_node* any = nullptr;
    for (const auto& n : nodes) {
        if (n.key != e.key) continue;
        if (n.value && *n.value == e.value) return &n;
        if (n.prefix && !prefix && e.value.starts_with(std::string_view(*n.value).substr(0, n.value->size() - 1)))
            prefix = &n;
        if (!n.value && !any) any = &n;
    }
    return prefix ? prefix : any;
}

}  // namespace

std::vector<descriptor_domain> compile_domains(const config::config& c, std::span<const policy> policies) {
    std::vector<descriptor_domain> out;
    for (const auto& d : c.service.domains) {
        descriptor_domain dom;
        dom.name = d.name;
        for (const auto& n : d.descriptors) dom.nodes.push_back(compile_node(d.name, c, policies, n));
        out.push_back(std::move(dom));
    }
    return out;
}

const descriptor_domain* find_domain(std::span<const descriptor_domain> domains, std::string_view name) {
    for (const auto& d : domains)
        if (d.name == name) return &d;
    return nullptr;
}

const descriptor_node* match(const descriptor_domain& d, std::span<const descriptor_entry> entries) {
    const descriptor_node* at = nullptr;
    const std::vector<descriptor_node>* level = &d.nodes;
    for (const auto& e : entries) {
        at = find_child(*level, e);
        if (!at) return nullptr;
        level = &at->children;
    }
    return at;
}

digest descriptor_check::id_of(const identity::hasher& hasher, const descriptor_node& n,
                               std::span<const descriptor_entry> entries) {
    std::array<std::string_view, max_request_keys> values;
    std::vector<std::string_view> more;  // a descriptor of more entries than max_request_keys
    std::span<const std::string_view> all;
    if (entries.size() <= values.size()) {
        for (std::size_t i = 0; i < entries.size(); ++i) values[i] = entries[i].value;
        all = std::span(values.data(), entries.size());
    } else {
        for (const auto& e : entries) more.push_back(e.value);
        all = more;
    }
    config::kind_spec::hash_input(all, input_);
    return hasher.hash(identity::to_string(n.kind), input_);
}

std::size_t descriptor_check::add_key(identity::kind kind, const digest& id, std::span<const tier> tiers,
                                      std::int64_t cost, std::size_t p) {
    auto& keys = keys_[p];
    std::size_t& count = counts_[p];
    // Two descriptors of one call that name one identifier at one cost are one key: the store
    // must not see it twice in a request. At two costs it is two keys, in two requests.
    for (std::size_t i = 0; i < count; ++i)
        if (keys[i].kind == kind && keys[i].id == id && keys[i].tiers.data() == tiers.data() && costs_[p][i] == cost)
            return i;
    if (count == keys.size()) return static_cast<std::size_t>(-1);
    keys[count] = store_key{kind, id, tiers, 0};
    costs_[p][count] = cost;
    return count++;
}

void descriptor_check::group_charged() {
    const std::size_t p = index(part::charged);
    const std::size_t n = counts_[p];
    std::array<std::size_t, max_request_keys> order;  // new position -> old
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n),
                     [&](std::size_t a, std::size_t b) { return costs_[p][a] < costs_[p][b]; });
    std::array<std::size_t, max_request_keys> at;  // old position -> new
    const auto keys = keys_[p];
    const auto costs = costs_[p];
    for (std::size_t i = 0; i < n; ++i) {
        keys_[p][i] = keys[order[i]];
        costs_[p][i] = costs[order[i]];
        at[order[i]] = i;
    }
    for (auto& s : slots_)
        if (s.in == part::charged) s.key = at[s.key];
    group_count_ = 0;
    for (std::size_t first = 0, i = 1; i <= n; ++i) {
        if (i < n && costs_[p][i] == costs_[p][first]) continue;
        groups_[group_count_++] = check_request{std::span(keys_[p].data() + first, i - first), costs_[p][first]};
        first = i;
    }
}

std::string descriptor_check::prepare(const identity::hasher& hasher, const descriptor_domain* d,
                                      std::span<const descriptor_ask> asks, const key_registry& registry) {
    slots_.assign(asks.size(), slot{});
    nodes_.assign(asks.size(), nullptr);
    users_.assign(asks.size(), std::string());
    refused_ = false;
    counts_.fill(0);
    group_count_ = 0;
    std::size_t total = 0;
    for (std::size_t i = 0; i < asks.size(); ++i) {
        const auto& a = asks[i];
        if (a.entries.empty()) return "descriptors[" + std::to_string(i) + "] has no entries";
        const descriptor_node* n = d ? match(*d, a.entries) : nullptr;
        if (!n || !n->limited()) continue;
        nodes_[i] = n;
        std::span<const tier> tiers = n->tiers;
        if (n->by_plan) {
            // The entry that matched the node is the descriptor's last: its value is the key.
            auto who = registry.users ? registry.users->resolve_key(a.entries.back().value) : identity::user_result{};
            if (who.status == identity::user_result::status::invalid) {
                slots_[i].refused = refusal::unknown_key;
                refused_ = refused_ || !n->shadow;
                continue;
            }
            // No key, and none required: no user, as on the gateway path.
            if (who.status == identity::user_result::status::none) continue;
            const std::string_view plan = who.plan.empty() ? registry.default_plan : std::string_view(who.plan);
            const auto it = std::find_if(n->plans.begin(), n->plans.end(),
                                         [&](const plan_tiers& p) { return !plan.empty() && p.plan == plan; });
            users_[i] = std::move(who.id);
            if (it == n->plans.end()) {
                slots_[i].refused = refusal::no_plan;
                refused_ = refused_ || !n->shadow;
                continue;
            }
            tiers = it->user;
        }
        const bool counts = a.cost > 0;
        const part in =
            n->shadow ? (counts ? part::shadow : part::shadow_queried) : (counts ? part::charged : part::queried);
        const std::size_t before = counts_[index(in)];
        const digest id =
            n->by_plan ? hasher.hash(identity::to_string(n->user_kind), users_[i]) : id_of(hasher, *n, a.entries);
        const std::size_t k = add_key(n->by_plan ? n->user_kind : n->kind, id, tiers, counts ? a.cost : 0, index(in));
        if (k != static_cast<std::size_t>(-1)) total += counts_[index(in)] - before;
        if (k == static_cast<std::size_t>(-1) || total > max_request_keys)
            return "more than " + std::to_string(max_request_keys) +
                   " limited descriptors in one call (one store request carries them all)";
        slots_[i] = {in, k, refusal::none};
    }
    group_charged();
    for (std::size_t p = 0; p < parts; ++p) {
        const bool query = p == index(part::queried) || p == index(part::shadow_queried);
        requests_[p] = check_request{std::span(keys_[p].data(), counts_[p]), counts_[p] > 0 ? costs_[p][0] : 0};
        if (!query && requests_[p].cost == 0) requests_[p].cost = 1;
        requests_[p].query = query;
    }
    return "";
}

}  // namespace sluice::limit
