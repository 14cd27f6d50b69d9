// The PROXY protocol header on the proxy listener (server.proxy_protocol): read first on a
// new connection, before any HTTP byte (and, with TLS, before the handshake).
//
// Contract: read_proxy_header() answers the connection's client address, or nullopt when
// the connection must be closed without an answer.
//   - server.proxy_protocol unset: `peer`, at once, nothing read.
//   - `peer` not in server.proxy_protocol.trusted: nullopt (reason untrusted).
//   - otherwise the header is read within server.proxy_protocol.header_timeout (armed on
//     `track` here; the deadline sweep cancels the socket), and exactly its bytes are taken
//     from the socket: it peeks (MSG_PEEK) to find the header's end, receives only up to it,
//     and a partial header's bytes (every one of them a header byte, identity::
//     parse_proxy_header's need_more) are taken before waiting for more, so a header split
//     in many writes is not re-peeked in a busy loop. What follows stays in the kernel for
//     the session (HTTP) or the TLS handshake.
//     A PROXY command's source is the answer; LOCAL, UNKNOWN, UNSPEC and UNIX answer `peer`.
//     A malformed header, a peer that closes first, or the deadline: nullopt.
// Each nullopt is counted in sluice_proxy_protocol_refused_total{reason} (not while the
// worker drains). The session runs it first in session::run().
//
// Thread: the owning worker's thread; `socket` and `track` outlive the call.
#pragma once

#include "http/deadline_sweep.hpp"
#include "identity/address.hpp"
#include "server/worker.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <optional>

namespace sluice::server {

boost::asio::awaitable<std::optional<identity::address>> read_proxy_header(worker& w,
                                                                           boost::asio::ip::tcp::socket& socket,
                                                                           http::tracked_connection& track,
                                                                           identity::address peer);

}  // namespace sluice::server
