#include "store/turn_batcher.hpp"

#include "store/redis_transport.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>

namespace sluice::store {

namespace asio = boost::asio;

namespace {

limit::check_result failure(const char* why) noexcept {
    limit::check_result out;
    out.state = limit::check_result::status::error;
    try {
        out.error = why;
    } catch (const std::exception&) {  // (no message: out of memory)
    }
    return out;
}

constexpr const char* store_failure = "redis store failure";

}  // namespace

turn_batcher::turn_batcher(asio::any_io_executor ex, std::size_t max_in_flight, send_fn send)
    : ex_(std::move(ex)), max_in_flight_(max_in_flight), send_(std::move(send)) {}

asio::awaitable<limit::check_result> turn_batcher::decide(const limit::check_request& r, std::uint16_t slot,
                                                          redis_clock::time_point deadline) {
    if (in_flight_ >= max_in_flight_) co_return failure(to_string(redis_error::overloaded));
    // Counted out by the batch's leader once it has the reply. (A frame destroyed with its
    // io_context, the batcher perhaps gone before, touches nothing: no guard object here.)
    ++in_flight_;
    const auto open = std::find_if(open_.begin(), open_.end(), [slot](const open_batch& o) { return o.slot == slot; });
    if (open == open_.end() || open->b->members.size() + 1 >= max_batch) co_return co_await lead(r, slot, deadline);

    // Joins the open batch: its leader sets `out` and wakes this check.
    auto* b = open->b;
    limit::check_result out;
    bool joined = false;
    try {
        co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
            [b, &r, &out, &joined](auto handler) {
                b->members.push_back({&r, &out, std::move(handler)});
                joined = true;
            },
            asio::use_awaitable);
    } catch (const std::exception&) {
        if (!joined) {  // only the initiation throws: it never joined
            --in_flight_;
            co_return failure(store_failure);
        }
    }
    co_return out;
}

asio::awaitable<limit::check_result> turn_batcher::lead(const limit::check_request& r, std::uint16_t slot,
                                                        redis_clock::time_point deadline) {
    batch mine;
    const auto full = std::find_if(open_.begin(), open_.end(), [slot](const open_batch& o) { return o.slot == slot; });
    if (full != open_.end()) {
        full->b = &mine;  // the full one is closed
    } else {
        try {
            open_.push_back({slot, &mine});
        } catch (const std::exception&) {
            --in_flight_;
            co_return failure(store_failure);
        }
    }
    bool yielded = true;
    try {
        co_await asio::post(ex_, asio::use_awaitable);
    } catch (const std::exception&) {
        yielded = false;
    }
    const auto mine_at =
        std::find_if(open_.begin(), open_.end(), [&mine](const open_batch& o) { return o.b == &mine; });
    if (mine_at != open_.end()) {
        *mine_at = open_.back();
        open_.pop_back();
    }
    const std::size_t n = 1 + mine.members.size();
    std::vector<limit::check_result> results;  // the leader's, then the members'
    if (yielded) {
        try {
            std::array<const limit::check_request*, max_batch> asked;
            asked[0] = &r;
            for (std::size_t i = 1; i < n; ++i) asked[i] = mine.members[i - 1].request;
            co_await send_(slot, requests(asked.data(), n), results, deadline);
        } catch (const std::exception& e) {
            spdlog::warn("redis store: {}", e.what());
            results.clear();
        }
    }
    in_flight_ -= n;
    // Every member is woken, whatever happened (each from the event loop, not from here).
    for (std::size_t i = 0; i < mine.members.size(); ++i) {
        auto& m = mine.members[i];
        try {
            *m.out = i + 1 < results.size() ? std::move(results[i + 1]) : failure(store_failure);
        } catch (const std::exception&) {
            m.out->state = limit::check_result::status::error;  // (no message: out of memory)
        }
        asio::post(ex_, [wake = std::move(m.wake)]() mutable { std::move(wake)(); });
    }
    co_return results.empty() ? failure(store_failure) : std::move(results[0]);
}

}  // namespace sluice::store
