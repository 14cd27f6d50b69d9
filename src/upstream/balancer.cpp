#include "upstream/balancer.hpp"

#include <algorithm>

namespace sluice::upstream {

namespace {

// A 64-bit finaliser (murmur3's fmix64): every input bit reaches every output bit, so
// nearby inputs (point numbers 0, 1, 2 of one key; sequential identifiers) land far apart.
std::uint64_t mix(std::uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb93fe53f6e53ULL;
    x ^= x >> 33;
    return x;
}

// FNV-1a over the key's bytes and then the point number's 4 bytes (little-endian whatever the
// machine, so a ring is the same everywhere), finalised by mix(): FNV-1a alone spreads its
// last bytes poorly. The number's fixed width keeps (key, number) pairs from colliding.
std::uint64_t point_hash(const std::string& key, std::uint32_t number) {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    constexpr std::uint64_t prime = 0x100000001b3ULL;
    for (unsigned char c : key) h = (h ^ c) * prime;
    for (int i = 0; i < 4; ++i) h = (h ^ ((number >> (8 * i)) & 0xff)) * prime;
    return mix(h);
}

// The n-th (from 0) index whose weight is not 0; n is below the number of candidates.
std::size_t nth_candidate(std::span<const unsigned> weights, std::size_t n) {
    for (std::size_t i = 0; i < weights.size(); ++i)
        if (weights[i] > 0 && n-- == 0) return i;
    return none;
}

}  // namespace

// A server whose weight is 0 keeps its score, as nginx does with a server that is down: the
// scores of all servers sum to 0 after every pick, so a frozen score stays bounded, and a
// server that comes back resumes where it was rather than with a burst.
std::size_t round_robin::pick(std::span<const unsigned> weights) {
    if (score_.size() != weights.size()) score_.resize(weights.size(), 0);  // truncates, or new ones at 0
    std::int64_t total = 0;
    std::size_t best = none;
    for (std::size_t i = 0; i < weights.size(); ++i) {
        if (weights[i] == 0) continue;
        total += weights[i];
        score_[i] += weights[i];
        if (best == none || score_[i] > score_[best]) best = i;  // the first on a tie
    }
    if (best != none) score_[best] -= total;
    return best;
}

// in_flight.size() is weights.size(). Both draws come from one random value: the low half
// picks one of n candidates, the high half one of the other n - 1 (skipping the first), by
// multiply-and-shift (a bias of at most n / 2^32), so there is no rejection loop.
std::size_t least_request(std::span<const unsigned> weights, std::span<const std::uint32_t> in_flight,
                          std::uint64_t random) {
    const auto n =
        static_cast<std::uint64_t>(std::count_if(weights.begin(), weights.end(), [](unsigned w) { return w > 0; }));
    if (n == 0) return none;
    if (n == 1) return nth_candidate(weights, 0);
    const std::uint64_t first = ((random & 0xffffffffULL) * n) >> 32;
    std::uint64_t second = ((random >> 32) * (n - 1)) >> 32;
    if (second >= first) ++second;
    const std::size_t a = nth_candidate(weights, first);
    const std::size_t b = nth_candidate(weights, second);
    // in_flight[a] / weights[a] <= in_flight[b] / weights[b], without division: each product
    // is below 2^64.
    const std::uint64_t load_a = std::uint64_t{in_flight[a]} * weights[b];
    const std::uint64_t load_b = std::uint64_t{in_flight[b]} * weights[a];
    return load_a <= load_b ? a : b;
}

// The weights at build are the configured ones, so a 0 (a server out of rotation when the
// ring is built) counts as 1: the ring keeps its points, and pick() skips them while it is 0.
// keys.size() is weights.size().
hash_ring::hash_ring(std::span<const std::string> keys, std::span<const unsigned> weights) {
    std::size_t count = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) count += 100 * std::size_t{std::max(weights[i], 1u)};
    points_.reserve(count);
    for (std::size_t i = 0; i < keys.size(); ++i) {
        const std::uint32_t n = 100 * std::max(weights[i], 1u);
        for (std::uint32_t p = 0; p < n; ++p)
            points_.push_back({point_hash(keys[i], p), static_cast<std::uint32_t>(i)});
    }
    // Ties (two keys' points at one place) by server, so that a ring does not depend on the sort.
    std::sort(points_.begin(), points_.end(),
              [](const point& x, const point& y) { return x.at != y.at ? x.at < y.at : x.server < y.server; });
}

std::size_t hash_ring::pick(std::uint64_t h, std::span<const unsigned> weights) const {
    // Without a candidate the walk below would go round the whole ring.
    if (points_.empty() || std::none_of(weights.begin(), weights.end(), [](unsigned w) { return w > 0; })) return none;
    const std::uint64_t at = mix(h);  // callers' hashes may be structured (sequential ids)
    const auto first =
        std::lower_bound(points_.begin(), points_.end(), at, [](const point& p, std::uint64_t v) { return p.at < v; });
    std::size_t j = static_cast<std::size_t>(first - points_.begin());
    for (std::size_t steps = 0; steps < points_.size(); ++steps, ++j) {
        if (j == points_.size()) j = 0;
        const std::size_t s = points_[j].server;
        if (s < weights.size() && weights[s] > 0) return s;
    }
    return none;  // every candidate is beyond the servers the ring was built with
}

}  // namespace sluice::upstream
