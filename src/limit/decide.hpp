// The semantics of every limit, in one pure function: decide(state, now, tiers, cost).
//
// Both stores reproduce it decision for decision: the MemoryStore calls it under its
// stripe locks, and the Redis script is tested against it. Times are integer
// microseconds of Unix time; buckets are aligned to Unix time, so a window starts at the
// same instant in every gateway.
//
// Thread: pure; the caller owns (and locks) the states it passes.
#pragma once

#include "config/config.hpp"

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace sluice::limit {

using usec = std::int64_t;
inline constexpr usec no_time = std::numeric_limits<usec>::min();

// A tier in the form decide() uses: durations in microseconds, derived values precomputed.
// Fixed and sliding buckets are numbered in time shifted by `offset`: bucket i holds
// [i * bucket, (i + 1) * bucket) - offset, or for a calendar month, month i (year * 12 +
// month - 1) of that shifted time.
struct tier {
    std::uint64_t key = 0;  // names the tier's state inside an identifier: a hash of `id`
    std::string id;         // <policy>/<kind>/<algorithm>/<per>/<precision|burst>
    std::string name;       // for the rate-limit headers, e.g. "ip-1s"
    config::algorithm algo = config::algorithm::sliding;
    std::int64_t limit = 0;
    usec per = 0;
    usec bucket = 0;           // fixed and sliding: the bucket size (fixed: per)
    std::int64_t buckets = 1;  // fixed and sliding: per / bucket
    bool month = false;        // fixed: a bucket is a calendar month (UTC); per is 31 days
    usec offset = 0;           // fixed: windows follow the clock of UTC + offset (-5h: days start at 05:00 UTC)
    std::int64_t burst = 0;    // gcra
    usec interval = 0;         // gcra emission interval T = ceil(per / limit)
    usec tolerance = 0;        // gcra: burst * T
    usec min_interval = 0;
    usec horizon = 0;  // how long after its last admission the state can matter

    // `id` as limit/policy builds it; `name` as the headers show it.
    static tier from(const config::tier_config& c, std::string id, std::string name);
    // This tier for one gateway of `n` deciding alone (store.on_error local): limit and
    // burst divided by n, rounded up, min_interval multiplied by n, and the values derived
    // from them recomputed.
    tier divided(std::int64_t n) const;
};

// One tier's state for one identifier. `data` is read by algorithm:
//   fixed, sliding: pairs (bucket index, count) of non-empty buckets, oldest first
//   gcra:           [tat]
//   log:            admitted timestamps, oldest first (a request of cost c adds c entries)
//   concurrency:    pairs (lease id, lease expiry) of the requests in flight, oldest first
struct tier_state {
    std::uint64_t key = 0;
    usec last = no_time;  // min_interval: the last admission
    std::vector<std::int64_t> data;
};

// Everything one identifier holds: one state per tier it has been limited by.
struct key_state {
    usec last_time = no_time;  // the latest `now` a commit used: the clock never goes back before it
    usec expires = no_time;    // after this instant nothing in the state can matter
    std::vector<tier_state> tiers;

    tier_state* find(std::uint64_t tier_key);
    tier_state& find_or_add(std::uint64_t tier_key);
};

// A request's view of one identifier: its state and the tiers that apply to it.
struct key_request {
    key_state* state;
    std::span<const tier> tiers;
};

// What an admission committed, as take_back needs it to take the commit back exactly whatever
// ran since: per key of the request (in order) the time its commit used (its `at`: now
// clamped to the key's clock). `local`: decided by store.on_error local on this gateway's
// memory store (fallback_store), which then takes it back.
struct receipt {
    std::vector<usec> at;
    bool local = false;
};

struct tier_result {
    const tier* t = nullptr;
    std::size_t key_index = 0;   // which key_request it belongs to
    std::int64_t remaining = 0;  // after this request (if admitted)
    usec reset = 0;              // until more quota is available (0: none is used; concurrency: always 0)
    bool admitted = true;        // this tier alone would admit the request
};

struct decision {
    bool allowed = true;
    usec retry_after = 0;  // when denied: the earliest later instant the same request is admitted, minus now
    std::vector<tier_result> tiers;

    // Denied by concurrency tiers alone: no one knows when a slot frees, so there is no
    // retry_after to promise. (With a rate tier refusing too, retry_after is its wait, the
    // earliest the request can pass.)
    bool retry_unknown() const;

    // The tier with the least remaining (ties: the longest reset), among the refusing tiers
    // when the request is refused; null if there are no tiers.
    const tier_result* tightest() const;
};

// Checks every tier of every key, and only if all admit, commits `cost` to each of them.
// A denial changes nothing. `now` is clamped per key to its last_time.
//
// With count_rejected (a policy's penalty mode) a denied request is committed too, and the
// decision is the check of the same request after that commit: the tiers as they now stand,
// and retry_after the instant this request would next be admitted.
//
// A concurrency tier takes one slot per request whatever its cost, under lease id `lease`
// until now + per (the lease), and only for an admitted request (a refused one is not in
// flight, counted or not). With lease 0 (a charge after the response) it is not checked and
// takes nothing.
//
// With `taken`, an admission fills it (a denial leaves it empty).
decision decide(std::span<const key_request> keys, usec now, std::int64_t cost, bool count_rejected = false,
                std::uint64_t lease = 0, receipt* taken = nullptr);

// Takes back `amount` of the admission that returned receipt `rc` (the same keys and tiers),
// exactly whatever ran since:
//   fixed, sliding  `amount` from the count of the bucket of rc.at (if still held; never below
//                   0, an emptied bucket dropped);
//   log             `amount` entries at rc.at (those still held);
//   gcra            amount * T off its tat, but never behind the present max(now, key clock)
//                   (one tat holds no history: when admissions followed that did not wait
//                   behind this one, they move up by as much, a little more than exact);
//   min_interval    with `whole` (nothing of the admission stays charged) the tier's mark goes
//                   if no commit followed it (a commit that passed its min_interval at rc.at
//                   also passed it for every later instant: no mark is then the same as the
//                   one before it);
//   concurrency     untouched (a lease goes through release_lease).
// The key clocks and expiries stay: state only shrinks.
void take_back(std::span<const key_request> keys, usec now, std::int64_t amount, const receipt& rc, bool whole = true);

// The concurrency slots of lease `lease` in `keys`: given back, or kept for another `per`
// from now (a lease that already lapsed is not taken again: its slot may be someone else's).
void release_lease(std::span<const key_request> keys, std::uint64_t lease);
void renew_lease(std::span<const key_request> keys, usec now, std::uint64_t lease);

// Rounds a duration in microseconds up to whole seconds.
inline std::int64_t ceil_s(usec d) { return d <= 0 ? 0 : (d + 999'999) / 1'000'000; }

std::uint64_t tier_key_of(std::string_view id);

// Calendar months (proleptic Gregorian, UTC): the month holding instant `t` as year * 12 +
// month - 1, and the instant month `index` starts.
std::int64_t month_of(usec t);
usec month_start(std::int64_t index);

}  // namespace sluice::limit
