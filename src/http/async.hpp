// The completion token of our coroutines: errors come back as values, never as exceptions
// (EOF, timeouts and resets are expected on the data path).
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::http {

inline constexpr auto use_tuple = boost::asio::as_tuple(boost::asio::use_awaitable);

}  // namespace sluice::http
