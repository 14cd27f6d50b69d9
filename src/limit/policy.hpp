// Policies compiled from a config snapshot: the tiers that apply to each kind of identifier.
//
// Thread: immutable after construction; shared by every worker.
#pragma once

#include "config/config.hpp"
#include "limit/decide.hpp"

#include <string>
#include <vector>

namespace sluice::limit {

struct policy {
    std::string name;
    bool shadow = false;
    std::vector<tier> ip, user;
    std::size_t metric_slot = 0;  // index for per-policy metrics
};

// Every policy of `c`, in file order.
std::vector<policy> compile_policies(const config::config& c);

}  // namespace sluice::limit
