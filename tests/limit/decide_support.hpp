// Helpers for the limit::decide tests: tiers built from a short spec, keys that own their
// state and tiers, probes on copies, and a state dump for before/after comparisons.
#pragma once

#include "limit/decide.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::limit::decide_test {

using config::algorithm;

inline constexpr usec MS = 1000;
inline constexpr usec SEC = 1'000'000;
inline constexpr usec MIN = 60 * SEC;
inline constexpr usec HOUR = 60 * MIN;
// 2023-11-14T21:00:00Z in microseconds: aligned to the hour (so to every bucket used here).
inline constexpr usec T0 = 1'699'995'600 * SEC;
static_assert(T0 % HOUR == 0);

inline usec fdiv(usec a, usec b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// A tier as the config would describe it; durations in milliseconds as in config::duration.
struct tier_spec {
    algorithm algo = algorithm::sliding;
    std::int64_t limit = 0;
    std::int64_t per_ms = 0;
    std::int64_t param = 0;  // sliding: precision in ms; gcra: burst; fixed, log: unused
    std::int64_t min_interval_ms = 0;
    std::string kind = "ip";
};

inline tier_spec fixed_spec(std::int64_t limit, std::int64_t per_ms, std::int64_t mi_ms = 0) {
    return {algorithm::fixed, limit, per_ms, 0, mi_ms, "ip"};
}
inline tier_spec sliding_spec(std::int64_t limit, std::int64_t per_ms, std::int64_t precision_ms,
                              std::int64_t mi_ms = 0) {
    return {algorithm::sliding, limit, per_ms, precision_ms, mi_ms, "ip"};
}
inline tier_spec gcra_spec(std::int64_t limit, std::int64_t per_ms, std::int64_t burst, std::int64_t mi_ms = 0) {
    return {algorithm::gcra, limit, per_ms, burst, mi_ms, "ip"};
}
inline tier_spec log_spec(std::int64_t limit, std::int64_t per_ms, std::int64_t mi_ms = 0) {
    return {algorithm::log, limit, per_ms, 0, mi_ms, "ip"};
}
inline tier_spec as_user(tier_spec s) {
    s.kind = "user";
    return s;
}

// A tier from its spec, with an id unique within a test even for tiers that differ only in limit
// or min_interval.
inline tier make_tier(const tier_spec& s) {
    config::tier_config c;
    c.kind = s.kind;
    c.limit = s.limit;
    c.per = config::duration{s.per_ms};
    c.algo = s.algo;
    c.precision = config::duration{s.algo == algorithm::fixed ? s.per_ms : s.algo == algorithm::sliding ? s.param : 0};
    c.burst = s.algo == algorithm::gcra ? s.param : 0;
    c.min_interval = config::duration{s.min_interval_ms};
    std::string id = "test/" + s.kind + "/" + std::string(config::to_string(s.algo)) + "/" + std::to_string(s.per_ms) +
                     "ms/" + std::to_string(s.param) + "/" + std::to_string(s.limit) + "/" +
                     std::to_string(s.min_interval_ms);
    return tier::from(c, id, s.kind + "-" + std::to_string(s.per_ms) + "ms");
}

// One identifier: its state and the tiers that apply to it.
struct key {
    key_state state;
    std::vector<tier> tiers;

    key() = default;
    explicit key(const std::vector<tier_spec>& specs) {
        for (const auto& s : specs) tiers.push_back(make_tier(s));
    }
};

inline decision run(const std::vector<key*>& keys, usec now, std::int64_t cost) {
    std::vector<key_request> reqs;
    for (key* k : keys) reqs.push_back({&k->state, k->tiers});
    return decide(reqs, now, cost);
}
inline decision run(key& k, usec now, std::int64_t cost = 1) { return run(std::vector<key*>{&k}, now, cost); }

// Decides on copies of the keys: the originals are untouched.
inline bool admits_on_copy(const std::vector<key*>& keys, usec now, std::int64_t cost) {
    std::vector<key> copies;
    copies.reserve(keys.size());
    for (key* k : keys) copies.push_back(*k);
    std::vector<key*> ptrs;
    for (auto& c : copies) ptrs.push_back(&c);
    return run(ptrs, now, cost).allowed;
}
inline bool admits_on_copy(const key& k, usec now, std::int64_t cost = 1) {
    key copy = k;
    return run(copy, now, cost).allowed;
}

// "" when retry_after is exact: the same request is admitted at now + retry, and not 1 µs
// earlier (nor 1 ms earlier when retry is a whole number of ms). Otherwise what went wrong.
inline std::string retry_problem(const std::vector<key*>& keys, usec now, std::int64_t cost, usec retry) {
    std::string p;
    if (retry <= 0) return "retry_after " + std::to_string(retry) + " is not positive";
    if (!admits_on_copy(keys, now + retry, cost)) p += "denied at now + retry_after; ";
    if (admits_on_copy(keys, now + retry - 1, cost)) p += "admitted 1us before now + retry_after; ";
    if (retry % MS == 0 && admits_on_copy(keys, now + retry - MS, cost)) p += "admitted 1ms before now + retry_after; ";
    return p;
}
inline std::string retry_problem(key& k, usec now, std::int64_t cost, usec retry) {
    return retry_problem(std::vector<key*>{&k}, now, cost, retry);
}

inline std::string dump(const key_state& s) {
    std::ostringstream o;
    o << "last_time=" << s.last_time << " expires=" << s.expires;
    for (const auto& t : s.tiers) {
        o << " | tier " << t.key << " last=" << t.last << " data=[";
        for (std::size_t i = 0; i < t.data.size(); ++i) o << (i ? "," : "") << t.data[i];
        o << "]";
    }
    return o.str();
}

inline const tier_state& state_of(const key& k, std::size_t tier_index) {
    for (const auto& s : k.state.tiers)
        if (s.key == k.tiers.at(tier_index).key) return s;
    static const tier_state none{};
    return none;
}

}  // namespace sluice::limit::decide_test
