// A client connection, read as the phases of a proxied request in order:
// request head -> checks -> upstream connection -> request body -> response head ->
// response body (or a tunnel after 101) -> next request on the same connection.
//
// Thread: the owning worker's thread only.
#pragma once

#include "http/worker.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace sluice::http {

// Serves one accepted connection until it closes. The session lives in the coroutine frame.
boost::asio::awaitable<void> serve(worker& w, boost::asio::ip::tcp::socket socket);

// Answers an error with a JSON body: {"error":"<code>","message":"<message>"}.
std::string error_response(unsigned status, std::string_view code, std::string_view message, bool close);

}  // namespace sluice::http
