// A local cache of denials, answered without asking the store.
#pragma once

#include "limit/store.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::limit {

// Recent denials of one worker, keyed by the request's identifiers, tiers (their keys, in
// order) and cost. A denial with retry_after R given at instant T means the same request
// is denied until T + R whatever else happens meanwhile (other admissions only push that
// instant later; a take-back, store::take_back, may bring it earlier: then the cache
// refuses until T + R what the store would admit, never admitting more), so find() answers
// it again until then: a copy with retry_after (and every tier's reset) reduced by the time
// elapsed. At most max_entries; the oldest are evicted first. Any store may use it; the
// Redis store does. Thread: one thread (the owning worker's).
class deny_cache {
public:
    using clock = std::chrono::steady_clock;

    explicit deny_cache(std::size_t max_entries) : max_(max_entries == 0 ? 1 : max_entries) {}

    std::optional<decision> find(const check_request& r, clock::time_point now);
    // `asked`: when the request was sent (earlier than Redis' clock read: the entry never
    // outlives the denial). Ignored unless `d` is a denial whose tiers point into `r`.
    void insert(const check_request& r, const decision& d, clock::time_point asked);
    void clear();
    std::size_t size() const { return map_.size(); }

private:
    struct entry {
        decision verdict;                   // tier pointers rebuilt from the request on each hit
        std::vector<std::size_t> tier_pos;  // per tier result: its index within its key's tiers
        clock::time_point given{}, until{};
        std::uint64_t seq = 0;
    };

    void key_of(const check_request& r);
    void evict_one();
    void compact_order();

    std::size_t max_;
    std::unordered_map<std::string, entry> map_;
    std::deque<std::pair<std::uint64_t, std::string>> order_;  // insertion order (may hold stale keys)
    std::string key_;                                          // scratch
    std::uint64_t seq_ = 0;
};

}  // namespace sluice::limit
