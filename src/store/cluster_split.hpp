// A check of several identifiers on a Redis Cluster, where one EVALSHA holds the keys of one
// hash slot only: one EVALSHA per identifier, sent in parallel to the nodes serving them;
// when one denies, the commits of the others are taken back (redis_script::build_undo), so
// a denied request leaves every tier as it found it unless the same identifier was admitted
// in between (then its cost stays counted: under-admission, never over-admission).
//
// Contract of decide_split():
//  - Every call (undos included) shares `deadline`; lease releases after a counted refusal
//    have one timeout of their own (the check's may be spent).
//  - A denial by any identifier is the answer even when another failed (the admitted parts
//    are taken back, the failed ones cannot be: their outcome is unknown); with no denial,
//    a failure is the answer (and nothing is taken back: the request may still be
//    forwarded). A count_rejected request is committed everywhere: nothing is taken back,
//    the admitting identifiers are checked again (query) as decide() does.
//  - `undone`: the admitted parts were taken back; the caller releases r's lease (an undo
//    leaves a field that changed since as it is, the slot taken there with it).
//  - Failures are values: no exception leaves the parallel calls.
//
// Thread: the worker's (the transport's); `c`'s references outlive the call.
#pragma once

#include "limit/store.hpp"
#include "store/redis_transport.hpp"

#include <boost/asio/awaitable.hpp>

#include <string_view>

namespace sluice::store {

struct split_context {
    redis_transport& transport;
    std::string_view sha;  // the script's SHA1
    std::string_view key_prefix;
    redis_counters& counters;
    redis_clock::duration timeout;  // store.redis.timeout
};

struct split_outcome {
    limit::check_result result;
    bool undone = false;
};

boost::asio::awaitable<split_outcome> decide_split(split_context c, limit::check_request r,
                                                   redis_clock::time_point deadline);

}  // namespace sluice::store
