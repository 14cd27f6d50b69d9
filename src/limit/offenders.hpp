// Who is being limited: the identities with the most refusals over the last minute, per
// worker in fixed memory, merged when read (GET /top on the admin listener).
//
// Each worker counts refusals in six 10-second periods, each a space-saving summary of at
// most `capacity` identities (Metwally et al.): an identity already held counts up; a new
// one takes a free entry, or when the summary is full replaces the entry with the fewest
// refusals and inherits its count (so a count can only be too high, by at most the
// `overcount` it inherited, and any identity refused more than 1/capacity of a period's
// refusals is always held). A read merges the periods of the last 60 s of every worker.
//
// Thread: refused() from the owning worker's thread; collect() from any thread (one mutex
// per worker, taken once per refusal and once per read).
#pragma once

#include "identity/kind.hpp"
#include "limit/store.hpp"

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::limit {

struct offender {
    std::size_t policy_slot = 0;  // which policy refused (its metrics slot)
    identity::kind kind = identity::kind::ip;
    digest id{};
    std::string label;   // as the operator knows it: the address, or the user
    std::string policy;  // the policy's name
    std::uint64_t refusals = 0;
    std::uint64_t overcount = 0;  // at most this many of `refusals` belong to others

    bool same(const offender& o) const { return policy_slot == o.policy_slot && kind == o.kind && id == o.id; }
};

// Appends a value as GET /top shows it: at most 64 bytes, and percent-encoded as in an admin
// path (/identities/<kind>/<value>) where it could be misread: '%', '+', '/', blanks,
// controls, quotes and bytes beyond ASCII.
void append_label_value(std::string& out, std::string_view v);

class offenders {
public:
    static constexpr std::size_t capacity = 128;  // identities per period per worker
    static constexpr std::int64_t period_s = 10;  // seconds per period
    static constexpr std::size_t periods = 6;     // a minute
    static constexpr std::int64_t window_s = period_s * periods;

    // One refusal at `now_s` (Unix seconds) of `kind`/`id` by `policy`.
    void refused(std::int64_t now_s, std::size_t policy_slot, std::string_view policy, identity::kind kind,
                 const digest& id, std::string_view label);
    // Appends this worker's entries of the periods within `window_s` of `now_s` to `into`
    // (an identity once per period).
    void collect(std::int64_t now_s, std::vector<offender>& into) const;

    // One entry per identity and policy, counts summed.
    static std::vector<offender> merge(const std::vector<offender>& all);
    // The `n` with the most refusals of `all` (merged first), most first (ties: by label).
    static std::vector<offender> top(std::vector<offender> all, std::size_t n);

private:
    struct key_hash {
        std::size_t operator()(const offender& o) const;
    };
    struct key_equal {
        bool operator()(const offender& a, const offender& b) const { return a.same(b); }
    };
    struct period {
        std::int64_t number = -1;  // now_s / period_s of what it holds
        std::vector<offender> items;
        std::unordered_map<offender, std::size_t, key_hash, key_equal> index;  // keys only: policy_slot, kind, id
    };
    mutable std::mutex mu_;
    std::array<period, periods> periods_;
};

}  // namespace sluice::limit
