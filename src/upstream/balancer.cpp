#include "upstream/balancer.hpp"

// Placeholder until the balancer lands (helper branch up-balancer).
namespace sluice::upstream {
std::size_t round_robin::pick(std::span<const unsigned> weights) {
    score_.resize(weights.size());
    std::int64_t total = 0;
    std::size_t best = none;
    for (std::size_t i = 0; i < weights.size(); ++i) {
        if (weights[i] == 0) continue;
        score_[i] += weights[i];
        total += weights[i];
        if (best == none || score_[i] > score_[best]) best = i;
    }
    if (best != none) score_[best] -= total;
    return best;
}
std::size_t least_request(std::span<const unsigned> weights, std::span<const std::uint32_t>, std::uint64_t) {
    for (std::size_t i = 0; i < weights.size(); ++i)
        if (weights[i]) return i;
    return none;
}
hash_ring::hash_ring(std::span<const std::string>, std::span<const unsigned>) {}
std::size_t hash_ring::pick(std::uint64_t, std::span<const unsigned> weights) const {
    for (std::size_t i = 0; i < weights.size(); ++i)
        if (weights[i]) return i;
    return none;
}
}  // namespace sluice::upstream
