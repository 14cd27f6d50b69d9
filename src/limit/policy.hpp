// Policies compiled from a config snapshot: the tiers that apply to each kind of identifier.
//
// Thread: immutable after construction; shared by every worker.
#pragma once

#include "config/config.hpp"
#include "limit/decide.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sluice::limit {

struct policy {
    std::string name;
    bool shadow = false;
    std::vector<tier> ip, user;
    std::size_t metric_slot = 0;  // index for per-policy metrics
};

// A tier's id: "<policy>/<kind>/<algorithm>/<per>/<precision|burst|per>", stable across
// reloads. It names the tier's counter in the store, so a tier keeps its counts through a
// reload that changes only its limit or min_interval. Two tiers of one policy with one id
// are refused by the config (config::shares_counter).
std::string tier_id(std::string_view policy, const config::tier_config& t);

// The tiers' names for the rate-limit headers, ip tiers then user tiers: "<kind>-<per>",
// unique within the policy. Names shared by several tiers get "-<algorithm>", and any still
// shared "-2", "-3"... from the second one on.
std::vector<std::string> tier_names(const config::policy_config& p);

// Every policy of `c`, in file order.
std::vector<policy> compile_policies(const config::config& c);

}  // namespace sluice::limit
