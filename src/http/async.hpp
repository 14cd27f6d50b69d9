// The completion token of our coroutines: errors come back as values, never as exceptions
// (EOF, timeouts and resets are expected on the data path).
#pragma once

#include "base/async.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <utility>

namespace sluice::http {

using base::use_tuple;

// Completes, consuming nothing, once the socket has a byte to read (n = 1), or has reached its
// end or an error (ec): a one-byte receive with MSG_PEEK into `byte`, which must outlive it.
// It stands for async_wait(wait_read) on the data path, which costs an epoll_ctl per wait
// (asio re-arms the descriptor for a wait). A receive is queued on the registration asio
// already holds, and bytes that came before it are not missed: an edge seen with no receive
// queued makes asio try the next one at once.
template <class Socket, class Token>
auto async_peek(Socket& s, char& byte, Token&& token) {
    return s.async_receive(boost::asio::buffer(&byte, 1), Socket::message_peek, std::forward<Token>(token));
}

}  // namespace sluice::http
