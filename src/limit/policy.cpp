#include "limit/policy.hpp"

namespace sluice::limit {

std::vector<policy> compile_policies(const config::config& c) {
    std::vector<policy> out;
    out.reserve(c.policies.size());
    for (const auto& pc : c.policies) {
        policy p{pc.name, pc.shadow, {}, {}, 0};
        for (const auto& t : pc.ip) p.ip.push_back(tier::from(t));
        for (const auto& t : pc.user) p.user.push_back(tier::from(t));
        out.push_back(std::move(p));
    }
    return out;
}

}  // namespace sluice::limit
