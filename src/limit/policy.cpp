#include "limit/policy.hpp"

#include "identity/kind.hpp"
#include "identity/kind_spec.hpp"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>

namespace sluice::limit {

namespace {

std::string per_text(const config::tier_config& t) {
    if (t.algo == config::algorithm::concurrency) return "concurrency";
    return t.month ? "month" : config::format_duration(t.per);
}

}  // namespace

std::string tier_id(std::string_view policy, const config::tier_config& t) {
    using config::algorithm;
    std::string id(policy);
    id += '/';
    id += t.kind;
    id += '/';
    id += config::to_string(t.algo);
    // Leases of one identifier share a counter whatever their length or number.
    if (t.algo == algorithm::concurrency) return id;
    id += '/';
    id += per_text(t);
    id += '/';
    switch (t.algo) {
        case algorithm::gcra: id += std::to_string(t.burst); break;
        case algorithm::log: id += per_text(t); break;
        case algorithm::concurrency: break;
        case algorithm::fixed:
        case algorithm::sliding: id += t.month ? "month" : config::format_duration(t.precision); break;
    }
    if (t.window_offset.count() != 0) {
        id += t.window_offset.count() < 0 ? "/-" : "/+";
        id += config::format_duration(config::duration(std::abs(t.window_offset.count())));
    }
    return id;
}

std::vector<std::string> tier_names(const config::policy_config& p) {
    std::vector<const config::tier_config*> tiers;
    for (const auto* list : {&p.ip, &p.user}) {
        for (const auto& t : *list) tiers.push_back(&t);
    }
    for (const auto& k : p.kinds) {
        for (const auto& t : k.tiers) tiers.push_back(&t);
    }
    return tier_names(tiers);
}

std::vector<std::string> tier_names(std::span<const config::tier_config* const> tiers) {
    std::vector<std::string> names;
    names.reserve(tiers.size());
    for (const auto* t : tiers) names.push_back(t->kind + '-' + per_text(*t));
    const auto shared = [](const std::vector<std::string>& all, auto it) {
        return std::count(all.begin(), all.end(), *it) > 1;
    };
    auto plain = names;
    for (auto it = plain.begin(); it != plain.end(); ++it) {
        if (!shared(plain, it)) continue;
        auto& name = names[it - plain.begin()];
        name += '-';
        name += config::to_string(tiers[it - plain.begin()]->algo);
    }
    plain = names;
    for (auto it = plain.begin(); it != plain.end(); ++it) {
        if (const auto before = std::count(plain.begin(), it, *it); before > 0) {
            names[it - plain.begin()] += '-' + std::to_string(before + 1);
        }
    }
    return names;
}

const std::vector<tier>* policy::plan_user(std::string_view plan) const {
    for (const auto& p : plans)
        if (p.plan == plan) return &p.user;
    return nullptr;
}

std::vector<policy> compile_policies(const config::config& c) {
    std::vector<policy> out;
    out.reserve(c.policies.size());
    // One bound per kind, as the memory store keeps one set of values per kind.
    std::map<std::string, std::uint64_t, std::less<>> bounds;
    for (const auto& pc : c.policies) {
        for (const auto& k : pc.kinds) {
            if (!config::bounded_kind(k.spec)) continue;
            auto& b = bounds[k.spec.text];
            b = std::max(b, k.max_values);
        }
    }
    const auto names_of = identity::names_used(c.policies);
    for (const auto& pc : c.policies) {
        policy p;
        p.name = pc.name;
        p.shadow = pc.shadow;
        p.user_by_plan = pc.user_by_plan;
        p.count_rejected = pc.count_rejected;
        p.refuse_missing_user = pc.user_missing == config::on_missing::refuse;
        const auto names = tier_names(pc);
        std::size_t n = 0;
        for (const auto& t : pc.ip) p.ip.push_back(tier::from(t, tier_id(pc.name, t), names[n++]));
        for (const auto& t : pc.user) p.user.push_back(tier::from(t, tier_id(pc.name, t), names[n++]));
        for (const auto& kc : pc.kinds) {
            auto& k = p.kinds.emplace_back();
            k.id = static_cast<std::uint16_t>(identity::kind_of(kc.spec.text));
            k.spec = kc.spec;
            for (const auto& t : kc.tiers) k.tiers.push_back(tier::from(t, tier_id(pc.name, t), names[n++]));
            k.refuse_missing = kc.missing == config::on_missing::refuse;
            if (const auto b = bounds.find(kc.spec.text); b != bounds.end())
                k.max_values = static_cast<std::uint32_t>(b->second);
            for (const auto& part : kc.spec.parts) k.slot.push_back(names_of.index_of(part));
        }
        if (pc.user_by_plan) {
            for (const auto& plan : c.plans) {
                // Named beside the policy's ip tiers, as the headers show them together.
                config::policy_config with_plan;
                with_plan.name = pc.name;
                with_plan.ip = pc.ip;
                with_plan.user = plan.user;
                const auto plan_names = tier_names(with_plan);
                const std::string id_base = pc.name + '@' + plan.name;
                auto& pt = p.plans.emplace_back(plan_tiers{plan.name, {}});
                for (std::size_t i = 0; i < plan.user.size(); ++i) {
                    pt.user.push_back(tier::from(plan.user[i], tier_id(id_base, plan.user[i]),
                                                 plan.name + '-' + plan_names[pc.ip.size() + i]));
                }
            }
        }
        const auto has_slots = [](const std::vector<tier>& tiers) {
            return std::any_of(tiers.begin(), tiers.end(),
                               [](const tier& t) { return t.algo == config::algorithm::concurrency; });
        };
        p.concurrent =
            has_slots(p.ip) || has_slots(p.user) ||
            std::any_of(p.plans.begin(), p.plans.end(), [&](const plan_tiers& pt) { return has_slots(pt.user); }) ||
            std::any_of(p.kinds.begin(), p.kinds.end(), [&](const kind_tiers& k) { return has_slots(k.tiers); });
        out.push_back(std::move(p));
    }
    return out;
}

}  // namespace sluice::limit
