// The checks of one turn of the worker's event loop, sent together: one EVALSHA per slot
// (one node: slot 0) decides them all, each in turn as its own call would (docs/design.md,
// "Purpose and principles": one round trip per decision; a measured optimisation,
// bench/README.md).
//
// The first check of a turn for a slot leads its batch: it yields once (post), so that the
// checks the rest of the turn asks for that slot join it, then sends them all with one call
// of `send` and hands each member its result. A check that finds the batch full (max_batch)
// leads the next one. Without sockets: `send` is whatever carries a batch (the store's
// EVALSHA over its transport; a fake in the unit tests).
//
// Contract:
//  - decide() answers every check exactly once, with the result `send` gave it, or an error
//    (overloaded at once when max_in_flight checks are in batches not yet answered; a
//    failure of `send` fails every member of its batch). It never throws, and a batch is
//    sent once: nothing here resends.
//  - `send` gets the batch in the order the checks were asked (the leader first) and the
//    leader's deadline; it fills `out` with one result per request (missing ones are errors).
//
// Thread: one worker's (the executor's). The checks' requests must live until they are
// answered (each is in its caller's coroutine frame).
#pragma once

#include "limit/store.hpp"
#include "store/redis_pipeline.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace sluice::store {

class turn_batcher {
public:
    static constexpr std::size_t max_batch = 64;
    using requests = std::span<const limit::check_request* const>;
    using send_fn = std::function<boost::asio::awaitable<void>(
        std::uint16_t slot, requests rs, std::vector<limit::check_result>& out, redis_clock::time_point deadline)>;

    turn_batcher(boost::asio::any_io_executor ex, std::size_t max_in_flight, send_fn send);
    turn_batcher(const turn_batcher&) = delete;
    turn_batcher& operator=(const turn_batcher&) = delete;

    // r's result, decided in this turn's batch for `slot`.
    boost::asio::awaitable<limit::check_result> decide(const limit::check_request& r, std::uint16_t slot,
                                                       redis_clock::time_point deadline);
    // Checks in batches, open or sent, not answered yet.
    std::size_t in_flight() const { return in_flight_; }

private:
    struct member {
        const limit::check_request* request = nullptr;
        limit::check_result* out = nullptr;
        boost::asio::any_completion_handler<void()> wake;
    };
    struct batch {
        std::vector<member> members;  // the leader's request is not among them
    };
    struct open_batch {
        std::uint16_t slot = 0;
        batch* b = nullptr;  // in its leader's coroutine frame
    };

    // Leads a new batch for `slot` (closing the open one: it is full).
    boost::asio::awaitable<limit::check_result> lead(const limit::check_request& r, std::uint16_t slot,
                                                     redis_clock::time_point deadline);

    boost::asio::any_io_executor ex_;
    std::size_t max_in_flight_;
    send_fn send_;
    std::vector<open_batch> open_;  // at most one per slot
    std::size_t in_flight_ = 0;     // <= max_in_flight_
};

}  // namespace sluice::store
