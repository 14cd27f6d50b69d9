// A check of several identifiers on a Redis Cluster, where one EVALSHA holds the keys of one
// hash slot only: one EVALSHA per identifier, sent in parallel to the nodes serving them, each
// asking for its receipt; when one denies, the commits of the others are taken back exactly
// (the script's mode undo, limit::take_back), so a denied request leaves nothing behind in
// any tier, whatever ran in between on those identifiers.
//
// Contract of decide_split():
//  - Every call (take-backs included) shares `deadline`; lease releases after a counted
//    refusal have one timeout of their own (the check's may be spent).
//  - A denial by any identifier is the answer even when another failed (the admitted parts
//    are taken back, the failed ones cannot be: their outcome is unknown); with no denial,
//    a failure is the answer (and nothing is taken back: the request may still be
//    forwarded). A count_rejected request is committed everywhere: nothing is taken back,
//    the admitting identifiers are checked again (query) as decide() does.
//  - An admission with r.want_receipt carries the receipt of every part.
//  - `undone`: the admitted parts were taken back; the caller releases r's lease (a take-back
//    leaves concurrency slots to it).
//  - Failures are values: no exception leaves the parallel calls.
//
// take_back_split(): store::take_back on a Cluster: one EVALSHA (mode undo) per identifier,
// in parallel, sharing `deadline`; true when every one answered.
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

boost::asio::awaitable<bool> take_back_split(split_context c, limit::check_request r, limit::receipt rc,
                                             std::int64_t amount, redis_clock::time_point deadline);

}  // namespace sluice::store
