// The socket-level moves of proxying, on behalf of one client connection: reading a
// message head, pumping a body from one socket to another in bounded pieces, connecting
// upstream, and the two-way tunnel after an Upgrade.
//
// Every wait is bounded by the connection's deadline, which the relay arms before each
// operation; an operation the deadline cut short answers beast::error::timeout.
//
// Thread: the owning worker's thread only.
#pragma once

#include "base/units.hpp"
#include "http/deadline_sweep.hpp"
#include "proxy/pool.hpp"
#include "tls/stream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

using error_code = boost::system::error_code;
using boost::asio::awaitable;
using boost::asio::ip::tcp;
using tls::stream;

// Bodies move in pieces of at most this size: memory per connection stays bounded.
inline constexpr std::size_t piece_size = 64 * base::KiB;
// The most a parser may hold unparsed while it waits for a line end (a chunk header with
// its extensions, a trailer): a longer line is a parse error, not a reason to buffer on.
inline constexpr std::size_t max_pending_line = 64 * base::KiB;

// When a request body must have arrived: `at`, pushed back by one second for every
// `bytes_per_second` received. A large body sent at a fair pace is never cut off; one
// that trickles (a byte a minute) is, at `at`. bytes_per_second 0: `at` never moves.
struct body_deadline {
    http::clock::time_point at = http::clock::time_point::max();
    std::uint64_t bytes_per_second = 0;
    void received(std::size_t n) {
        if (bytes_per_second == 0 || at == http::clock::time_point::max()) return;
        at += std::chrono::nanoseconds(static_cast<std::int64_t>(n) * 1'000'000'000 /
                                       static_cast<std::int64_t>(bytes_per_second));
    }
};

// Which side of a body transfer failed, if any.
struct pump_result {
    enum side { ok, read, write, parse } failed = ok;
    error_code ec;
    std::uint64_t written = 0;  // bytes written to the destination
};

class relay {
public:
    explicit relay(http::tracked_connection& track) : track_(track) {}

    // Reads until `p` has a complete head, by `deadline`. `got_some` tells whether any
    // byte arrived (a pooled connection closed before answering sends none).
    template <class Parser>
    awaitable<error_code> read_head(Parser& p, stream& src, boost::beast::flat_buffer& buf,
                                    http::clock::time_point deadline, bool& got_some);

    // Moves the rest of a message from src to dst. The parser's sink appends re-framed body
    // bytes to `out`, which is flushed to dst once it passes piece_size and whenever the
    // parser needs more input, so memory stays bounded whatever the body size. Whatever
    // `out` holds on entry (a head) goes first. Each read waits at most `read_timeout` and,
    // with a `deadline`, none past it; each write at most `write_timeout`. With a `deadline`
    // (a request body), a source that sent less than a piece is awaited holding no buffer.
    template <class Parser>
    awaitable<pump_result> pump(Parser& p, stream& src, boost::beast::flat_buffer& buf,
                                http::clock::duration read_timeout, body_deadline* deadline, stream& dst,
                                http::clock::duration write_timeout, std::string& out);

    // Parses what `src` sends into `p`'s sink (appending to `out`) until the message is
    // done or `out` holds more than `limit` bytes, by `deadline`. Only `failed` of read
    // and parse is set; `written` stays 0.
    template <class Parser>
    awaitable<pump_result> fill(Parser& p, stream& src, boost::beast::flat_buffer& buf, body_deadline& deadline,
                                std::string& out, std::size_t limit);

    awaitable<error_code> read_some(stream& s, boost::beast::flat_buffer& buf);
    awaitable<error_code> write_all(stream& s, std::string_view data, http::clock::duration timeout);
    awaitable<error_code> connect(upstream_connection& up, const tcp::endpoint& endpoint,
                                  http::clock::duration timeout);
    // TLS over a connected `up`, through `ssl` (a client's), within `timeout`.
    awaitable<error_code> handshake(upstream_connection& up, tls::ssl_ptr ssl, http::clock::duration timeout);

    // Copies bytes both ways until both sides have closed, or until neither side has sent
    // anything for `idle` (bytes already read into the buffers go first).
    awaitable<void> tunnel(stream& client, boost::beast::flat_buffer& client_buf, upstream_connection& up,
                           http::clock::duration idle);

    // operation_aborted caused by the deadline becomes beast::error::timeout.
    error_code timed(error_code ec) const;
    static bool is_timeout(const error_code& ec);

private:
    awaitable<void> copy(stream& from, boost::beast::flat_buffer& buf, stream& to, http::clock::duration idle);

    http::tracked_connection& track_;
};

}  // namespace sluice::proxy
