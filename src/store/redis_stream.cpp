#include "store/redis_stream.hpp"

#include "base/async.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <openssl/err.h>

#include <vector>

namespace sluice::store {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;

namespace {

using base::use_tuple;

}  // namespace

redis_stream::redis_stream(asio::any_io_executor ex, const redis_connection_options& o)
    : ex_(std::move(ex)), opts_(o), socket_(ex_) {}

awaitable<error_code> redis_stream::open(const std::string& host, std::uint16_t port, asio::steady_timer& timer) {
    using namespace asio::experimental::awaitable_operators;
    closed_ = false;
    std::vector<tcp::endpoint> endpoints;
    error_code ec;
    auto literal = asio::ip::make_address(host, ec);
    if (!ec) {
        endpoints.emplace_back(literal, port);
    } else {
        tcp::resolver resolver(ex_);
        auto [rec, found] = co_await resolver.async_resolve(host, std::to_string(port), use_tuple);
        if (rec) {
            spdlog::warn("redis: cannot resolve {}: {}", host, rec.message());
            co_return rec;
        }
        for (const auto& e : found) endpoints.push_back(e.endpoint());
    }
    if (closed_) co_return asio::error::operation_aborted;
    timer.expires_after(opts_.connect_timeout);  // the connect and the handshake, after the lookup

    tls_.reset();  // it refers to socket_
    socket_ = tcp::socket(ex_);
    auto connected = co_await (asio::async_connect(socket_, endpoints, use_tuple) || timer.async_wait(use_tuple));
    if (connected.index() != 0) co_return asio::error::timed_out;
    if (auto cec = std::get<0>(std::get<0>(connected)); cec) co_return cec;
    socket_.set_option(tcp::no_delay(true), ec);
    if (!opts_.tls) co_return error_code{};

    tls_ = std::make_unique<tls_stream>(socket_, *opts_.tls);
    const std::string& name = opts_.tls_server_name.empty() ? host : opts_.tls_server_name;
    tls_->set_verify_callback(asio::ssl::host_name_verification(name), ec);
    if (ec) co_return ec;
    asio::ip::make_address(name, ec);
    if (ec && !SSL_set_tlsext_host_name(tls_->native_handle(), name.c_str()))  // SNI takes names only
        co_return error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category());
    auto shaken =
        co_await (tls_->async_handshake(asio::ssl::stream_base::client, use_tuple) || timer.async_wait(use_tuple));
    if (shaken.index() != 0) co_return asio::error::timed_out;
    co_return std::get<0>(std::get<0>(shaken));
}

awaitable<std::tuple<error_code, std::size_t>> redis_stream::read_some(asio::mutable_buffer b) {
    if (tls_) co_return co_await tls_->async_read_some(b, use_tuple);
    co_return co_await socket_.async_read_some(b, use_tuple);
}

awaitable<std::tuple<error_code, std::size_t>> redis_stream::write_all(asio::const_buffer b) {
    if (tls_) co_return co_await asio::async_write(*tls_, b, use_tuple);
    co_return co_await asio::async_write(socket_, b, use_tuple);
}

void redis_stream::close() {
    closed_ = true;
    error_code ignored;
    if (socket_.is_open()) socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
}

void redis_stream::reset() {
    close();
    tls_.reset();
}

awaitable<reply_ptr> redis_stream::ask_once(config::host_port to, std::string command) {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer timer(ex_, opts_.connect_timeout);
    auto fail = [&](const error_code& ec) {
        spdlog::debug("redis: asking {}:{} failed: {}", to.host, to.port, ec.message());
        reset();
        return reply_ptr();
    };
    if (auto ec = co_await open(to.host, to.port, timer); ec) co_return fail(ec);
    auto wrote = co_await (write_all(asio::buffer(command)) || timer.async_wait(use_tuple));
    if (wrote.index() != 0) co_return fail(asio::error::timed_out);
    if (auto ec = std::get<0>(std::get<0>(wrote)); ec) co_return fail(ec);
    reply_reader reader;
    std::string buf(4096, '\0');
    for (;;) {  // bounded by the timer
        auto got = co_await (read_some(asio::buffer(buf)) || timer.async_wait(use_tuple));
        if (got.index() != 0) co_return fail(asio::error::timed_out);
        auto [ec, n] = std::get<0>(got);
        if (ec) co_return fail(ec);
        if (!reader.feed(std::string_view(buf.data(), n))) co_return fail(asio::error::invalid_argument);
        reply_ptr reply;
        auto st = reader.next(reply);
        if (st == reply_reader::status::error) co_return fail(asio::error::invalid_argument);
        if (st == reply_reader::status::reply) {
            reset();
            co_return reply;
        }
    }
}

}  // namespace sluice::store
