#include "proxy/relay.hpp"

#include "http/async.hpp"
#include "http/message.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include <tuple>

namespace sluice::proxy {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

using http::use_tuple;

namespace {

// Feeds what `buf` holds to the parser. Sets need_input when it cannot go on without more
// bytes; fails rather than let a line without an end grow the buffer past max_pending_line.
template <class Parser>
error_code feed(Parser& p, boost::beast::flat_buffer& buf, bool& need_input) {
    need_input = buf.size() == 0;
    if (need_input) return {};
    error_code ec;
    auto n = p.put(buf.data(), ec);
    buf.consume(n);
    if (ec == bhttp::error::need_more || (!ec && n == 0)) {
        need_input = true;
        return buf.size() >= max_pending_line ? error_code(bhttp::error::bad_chunk) : error_code{};
    }
    return ec;
}

}  // namespace

bool relay::is_timeout(const error_code& ec) { return ec == boost::beast::error::timeout; }

error_code relay::timed(error_code ec) const {
    return ec == asio::error::operation_aborted && track_.expired() ? boost::beast::error::timeout : ec;
}

template <class Parser>
awaitable<error_code> relay::read_head(Parser& p, stream& src, boost::beast::flat_buffer& buf,
                                       http::clock::time_point deadline, bool& got_some) {
    track_.arm_until(deadline);
    for (;;) {
        if (buf.size() > 0) {
            got_some = true;
            error_code ec;
            auto n = p.put(buf.data(), ec);
            buf.consume(n);
            if (!ec && p.is_header_done()) co_return error_code{};
            if (ec && ec != bhttp::error::need_more) co_return ec;
        }
        auto ec = co_await read_some(src, buf);
        if (ec) co_return ec;
    }
}

template <class Parser>
awaitable<pump_result> relay::pump(Parser& p, stream& src, boost::beast::flat_buffer& buf,
                                   http::clock::duration read_timeout, body_deadline* deadline, stream& dst,
                                   http::clock::duration write_timeout, std::string& out_) {
    pump_result r;
    auto flush = [&]() -> awaitable<bool> {
        if (out_.empty()) co_return true;
        r.ec = co_await write_all(dst, out_, write_timeout);
        r.written += out_.size();
        out_.clear();
        if (out_.capacity() > 2 * piece_size) std::string().swap(out_);  // a read-ahead body's: pieces need less
        if (r.ec) r.failed = pump_result::write;
        co_return !r.ec;
    };
    while (!p.is_done()) {
        bool need_input = false;
        if (auto ec = feed(p, buf, need_input)) {
            r.failed = pump_result::parse;
            r.ec = ec;
            co_return r;
        }
        if (out_.size() >= piece_size || (need_input && !out_.empty())) {
            if (!co_await flush()) co_return r;
        }
        if (!need_input) continue;
        const auto per_read = http::clock::now() + read_timeout;
        track_.arm_until(deadline ? std::min(per_read, deadline->at) : per_read);
        const auto before = buf.size();
        auto ec = co_await read_some(src, buf);
        if (deadline) deadline->received(buf.size() - before);
        if (ec == asio::error::eof) {
            p.put_eof(ec);
            if (!ec) continue;
            ec = asio::error::eof;
        }
        if (ec) {
            r.failed = pump_result::read;
            r.ec = ec;
            co_return r;
        }
    }
    co_await flush();
    co_return r;
}

template <class Parser>
awaitable<pump_result> relay::fill(Parser& p, stream& src, boost::beast::flat_buffer& buf, body_deadline& deadline,
                                   std::string& out, std::size_t limit) {
    pump_result r;
    while (!p.is_done() && out.size() <= limit) {
        bool need_input = false;
        if (auto ec = feed(p, buf, need_input)) {
            r.failed = pump_result::parse;
            r.ec = ec;
            co_return r;
        }
        if (!need_input) continue;
        track_.arm_until(deadline.at);
        const auto before = buf.size();
        auto ec = co_await read_some(src, buf);
        deadline.received(buf.size() - before);
        if (ec) {
            r.failed = pump_result::read;
            r.ec = ec;
            co_return r;
        }
    }
    co_return r;
}

awaitable<error_code> relay::read_some(stream& s, boost::beast::flat_buffer& buf) {
    auto [ec, n] = co_await s.async_read_some(buf.prepare(piece_size), use_tuple);
    buf.commit(n);
    co_return timed(ec);
}

awaitable<error_code> relay::write_all(stream& s, std::string_view data, http::clock::duration timeout) {
    track_.arm(timeout);
    auto [ec, n] = co_await asio::async_write(s, asio::buffer(data), use_tuple);
    co_return timed(ec);
}

awaitable<error_code> relay::connect(upstream_connection& up, const tcp::endpoint& endpoint,
                                     http::clock::duration timeout) {
    track_.arm(timeout);
    auto& socket = up.stream.socket();
    error_code ec;
    socket.open(endpoint.protocol(), ec);
    if (ec) co_return ec;
    std::tie(ec) = co_await socket.async_connect(endpoint, use_tuple);
    ec = timed(ec);
    if (!ec) socket.set_option(tcp::no_delay(true), ec);
    co_return ec;
}

awaitable<error_code> relay::handshake(upstream_connection& up, tls::ssl_ptr ssl, http::clock::duration timeout) {
    up.stream.start_tls(std::move(ssl));
    track_.arm(timeout);
    auto [ec, n] = co_await up.stream.async_handshake(use_tuple);
    co_return timed(ec);
}

// Copies bytes one way until EOF, then half-closes the other side.
awaitable<void> relay::copy(stream& from, boost::beast::flat_buffer& buf, stream& to, http::clock::duration idle) {
    for (;;) {
        if (buf.size() > 0) {
            auto [ec, n] = co_await asio::async_write(to, buf.data(), use_tuple);
            if (ec) break;
            buf.consume(n);
        }
        track_.arm(idle);  // the tunnel lives while either side talks
        auto ec = co_await read_some(from, buf);
        if (ec && buf.size() == 0) break;
    }
    to.shutdown_send();
}

awaitable<void> relay::tunnel(stream& client, boost::beast::flat_buffer& client_buf, upstream_connection& up,
                              http::clock::duration idle) {
    using namespace asio::experimental::awaitable_operators;
    co_await (copy(client, client_buf, up.stream, idle) && copy(up.stream, up.buffer, client, idle));
    up.stream.close();
}

template awaitable<error_code> relay::read_head(http::response_parser&, stream&, boost::beast::flat_buffer&,
                                                http::clock::time_point, bool&);
template awaitable<pump_result> relay::pump(http::request_parser&, stream&, boost::beast::flat_buffer&,
                                            http::clock::duration, body_deadline*, stream&, http::clock::duration,
                                            std::string&);
template awaitable<pump_result> relay::pump(http::response_parser&, stream&, boost::beast::flat_buffer&,
                                            http::clock::duration, body_deadline*, stream&, http::clock::duration,
                                            std::string&);
template awaitable<pump_result> relay::fill(http::request_parser&, stream&, boost::beast::flat_buffer&, body_deadline&,
                                            std::string&, std::size_t);

}  // namespace sluice::proxy
