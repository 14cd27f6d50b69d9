// Policies compiled from a config snapshot: the tiers that apply to each kind of identifier.
//
// Thread: immutable after construction; shared by every worker.
#pragma once

#include "config/config.hpp"
#include "limit/decide.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::limit {

// One plan's user tiers within a policy with `user: plan`.
struct plan_tiers {
    std::string plan;
    std::vector<tier> user;
};

// The tiers of one kind other than ip and user within a policy (policies.<name>.<kind>).
struct kind_tiers {
    // identity::kind_of(spec.text), as its number: route/ knows this header, and nothing of identity/.
    std::uint16_t id = 0;
    config::kind_spec spec;
    std::vector<tier> tiers;
    bool refuse_missing = false;  // on_missing: refuse (else skip)
    // The most values of this kind the memory store holds (the largest max_values any policy
    // gives the kind); 0: bounded by store.memory.max_keys alone.
    std::uint32_t max_values = 0;
    // Per part, where the caller holds its value: the index of its name in
    // identity::clients::names (header, claim and query parts).
    std::vector<std::size_t> slot;
};

struct policy {
    std::string name;
    bool shadow = false;
    std::vector<tier> ip, user;
    std::size_t metric_slot = 0;  // index for per-policy metrics
    bool user_by_plan = false;    // the user tiers are the caller's plan's: in `plans`, not `user`
    std::vector<plan_tiers> plans;
    bool count_rejected = false;       // penalty mode: refused requests count too
    bool concurrent = false;           // some tier (ip, user, a plan's or another kind's) is a concurrency tier
    std::vector<kind_tiers> kinds;     // every other kind, in file order
    bool refuse_missing_user = false;  // on_missing: {user: refuse}

    // user_by_plan: the tiers of `plan`, or null when the config has no such plan.
    const std::vector<tier>* plan_user(std::string_view plan) const;
};

// A tier's id: "<policy>/<kind>/<algorithm>/<per>/<precision|burst|per>[/<+|-><offset>]"
// ("month" for per: month; "<policy>/<kind>/concurrency" for a concurrency tier), stable across reloads; a plan's tier
// in a policy: "<policy>@<plan>/user/...", so a caller moved to another plan starts that plan's counts. It names the
// tier's counter in the store, so a tier keeps its counts through a reload that changes only its limit or min_interval.
// Two tiers of one policy (or plan) with one id are refused by the config (config::shares_counter).
std::string tier_id(std::string_view policy, const config::tier_config& t);

// The tiers' names for the rate-limit headers, ip tiers, user tiers, then the other kinds' in
// file order: "<kind>-<per>" ("<kind>-concurrency"; the kind's canonical text: "header:x-tenant-1s"),
// unique within the policy. Names shared by several tiers get "-<algorithm>", and any still
// shared "-2", "-3"... from the second one on. A plan's user tiers are named
// "<plan>-user-<per>" the same way.
std::vector<std::string> tier_names(const config::policy_config& p);
// The same naming over any list of tiers (a rate-limit descriptor's).
std::vector<std::string> tier_names(std::span<const config::tier_config* const> tiers);

// Every policy of `c`, in file order.
std::vector<policy> compile_policies(const config::config& c);

}  // namespace sluice::limit
