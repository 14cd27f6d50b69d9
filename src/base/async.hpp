// What every coroutine of ours shares: errors as values, never as exceptions (EOF, timeouts and
// resets are expected on the data path), and a spawned coroutine's escaping exception logged.
#pragma once

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>

namespace sluice::base {

inline constexpr auto use_tuple = boost::asio::as_tuple(boost::asio::use_awaitable);

// The completion handler of co_spawn for a coroutine that should end without an exception:
// one that escapes is logged as an error, `what` naming the coroutine ("connection").
inline auto log_exception(const char* what) {
    return [what](const std::exception_ptr& e) {
        if (!e) return;
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& ex) {
            spdlog::error("{} ended by an unexpected exception: {}", what, ex.what());
        } catch (...) {
            spdlog::error("{} ended by an unexpected exception", what);
        }
    };
}

}  // namespace sluice::base
