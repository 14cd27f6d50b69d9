// The byte stream to one Redis server (or sentinel): TCP, or TLS over it when the options
// carry a TLS context. Opening resolves, connects and shakes hands within connect_timeout;
// reads and writes go to TLS or the socket, whichever this connection uses.
//
// Contract:
//  - open() closes whatever was open, then connects anew. With TLS, the server's
//    certificate must chain to the context's CA and name tls_server_name (or the host).
//  - close() ends the connection and cuts short a read, a write or an open() in progress
//    (they complete with an error); the TLS state stays until the next open() or reset(),
//    so that an operation still running on it may finish.
//
// Thread: the executor's (one worker's io_context).
#pragma once

#include "config/config.hpp"
#include "store/redis_options.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

namespace sluice::store {

class redis_stream {
public:
    // `o`'s TLS context and server name and connect_timeout; `o` must outlive the stream.
    redis_stream(boost::asio::any_io_executor ex, const redis_connection_options& o);

    // Resolves and connects to host:port, then with TLS shakes hands, all before `timer`
    // expires (armed by the caller for the lookup, then again for connect_timeout).
    boost::asio::awaitable<boost::system::error_code> open(const std::string& host, std::uint16_t port,
                                                           boost::asio::steady_timer& timer);
    // One read, or one whole write.
    boost::asio::awaitable<std::tuple<boost::system::error_code, std::size_t>> read_some(boost::asio::mutable_buffer b);
    boost::asio::awaitable<std::tuple<boost::system::error_code, std::size_t>> write_all(boost::asio::const_buffer b);
    void close();
    // close(), and the TLS state goes too (nothing may be running on the stream).
    void reset();

    // Opens a connection to `to`, sends `command` (RESP), reads one reply and resets the
    // stream, all within connect_timeout: the reply, or null (the failure logged at debug).
    boost::asio::awaitable<reply_ptr> ask_once(config::host_port to, std::string command);

private:
    using tls_stream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>;

    boost::asio::any_io_executor ex_;
    const redis_connection_options& opts_;
    boost::asio::ip::tcp::socket socket_;
    std::unique_ptr<tls_stream> tls_;  // over socket_, made afresh by each open()
    bool closed_ = false;              // close() during open()'s lookup: do not connect
};

}  // namespace sluice::store
