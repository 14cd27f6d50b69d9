// How a pool picks a server for a request (config `balance:`). Pure logic, no I/O: the
// caller passes each server's effective weight (0: not a candidate now: unhealthy,
// ejected, or already tried by this request) and, for least_request, its requests in flight.
//
// Thread: a round_robin belongs to one worker; a hash_ring is immutable once built and
// may be shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sluice::upstream {

inline constexpr std::size_t none = static_cast<std::size_t>(-1);

// Smooth weighted round robin, as nginx does it: every pick adds each candidate's weight to
// its running score, takes the highest score and takes the total weight off it. Over any
// run of sum(weights) picks with stable weights, server i is picked exactly weights[i]
// times, spread out (5,1,1 gives a a b a c a a, not a a a a a b c).
class round_robin {
public:
    // The index picked, or `none` if every weight is 0. The number of servers may change
    // between calls (scores of new servers start at 0).
    std::size_t pick(std::span<const unsigned> weights);

private:
    std::vector<std::int64_t> score_;
};

// Power of two choices: two distinct candidates drawn by `random` (uniform over the
// candidates), and the one with fewer requests in flight per unit of weight taken (the
// first of the two on a tie). One candidate: that one. `none` if there is none.
std::size_t least_request(std::span<const unsigned> weights, std::span<const std::uint32_t> in_flight,
                          std::uint64_t random);

// Consistent hashing over a ring of virtual nodes: each server has 100 x weight points,
// placed by a hash of its `key` (stable for a server: its address) and the point's number.
// A request's hash goes to the first point clockwise whose server is a candidate, so
// removing one of N servers moves only the identifiers it held (about 1/N), and an
// identifier whose server is not a candidate goes to the next server on the ring.
class hash_ring {
public:
    hash_ring() = default;
    hash_ring(std::span<const std::string> keys, std::span<const unsigned> weights);

    // The server for `h`, skipping servers whose weights[i] is 0; `none` if none is a
    // candidate (or the ring is empty). weights.size() is the number of servers built with.
    std::size_t pick(std::uint64_t h, std::span<const unsigned> weights) const;

private:
    struct point {
        std::uint64_t at;
        std::uint32_t server;
    };
    std::vector<point> points_;  // sorted by `at`
};

}  // namespace sluice::upstream
