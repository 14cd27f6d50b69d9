#include "tls/stream.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>

#include <cerrno>

namespace sluice::tls {

error_code ssl_error(SSL* ssl, int ret) {
    const int e = SSL_get_error(ssl, ret);
    if (e == SSL_ERROR_ZERO_RETURN) return boost::asio::error::eof;
    if (e == SSL_ERROR_SYSCALL) {
        const int saved = errno;
        ERR_clear_error();
        if (saved == 0) return boost::asio::error::eof;
        return {saved, boost::system::system_category()};
    }
    const unsigned long first = ERR_peek_error();
    ERR_clear_error();
    // OpenSSL 3 reports a peer that closed without close_notify so; HTTP framing (or its
    // absence) decides what that means, as it does for a plain socket's end.
    if (ERR_GET_LIB(first) == ERR_LIB_SSL && ERR_GET_REASON(first) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
        return boost::asio::error::eof;
    if (first == 0) return boost::asio::ssl::error::stream_truncated;
    return {static_cast<int>(first), boost::asio::error::get_ssl_category()};
}

stream::~stream() = default;

void stream::start_tls(ssl_ptr ssl) {
    ssl_ = std::move(ssl);
    SSL_set_fd(ssl_.get(), sock_.native_handle());
    SSL_set_mode(ssl_.get(),
                 SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    error_code ec;
    sock_.non_blocking(true, ec);  // OpenSSL calls recv and send on the descriptor itself
}

std::size_t stream::read_some_now(boost::asio::mutable_buffer b, error_code& ec) {
    ec = {};
    if (!ssl_) return sock_.read_some(b, ec);  // the socket is non-blocking: would_block
    std::size_t n = 0;
    ERR_clear_error();
    const int r = SSL_read_ex(ssl_.get(), b.data(), b.size(), &n);
    if (r > 0) return n;
    const int e = SSL_get_error(ssl_.get(), r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        ec = boost::asio::error::would_block;
        return 0;
    }
    ec = ssl_error(ssl_.get(), r);
    return 0;
}

void stream::shutdown_send() {
    if (ssl_ && SSL_is_init_finished(ssl_.get()) && !(SSL_get_shutdown(ssl_.get()) & SSL_SENT_SHUTDOWN)) {
        SSL_shutdown(ssl_.get());
        ERR_clear_error();
    }
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
}

void stream::close() {
    error_code ec;
    sock_.close(ec);
}

}  // namespace sluice::tls
