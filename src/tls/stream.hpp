// A connection's byte stream: a TCP socket, or TLS over it. One type for both, so the
// session's phases, the relay and the pool are written once.
//
// TLS runs OpenSSL directly on the socket's descriptor (SSL_set_fd, non-blocking), the
// way nginx does: an SSL call that would block says which way, and the operation waits
// for the socket to become readable (a one-byte MSG_PEEK receive, see http::async_peek)
// or writable, then calls again. The stream holds no buffer of its own; with
// SSL_MODE_RELEASE_BUFFERS OpenSSL frees its record buffers while a connection is idle,
// so an idle TLS connection costs the SSL object only.
//
// Cancelling the socket (the deadline sweep does) ends a pending operation with
// operation_aborted, as for a plain socket.
//
// Thread: the owning worker's thread only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <utility>

namespace sluice::tls {

using error_code = boost::system::error_code;
using tcp = boost::asio::ip::tcp;

struct ssl_free {
    void operator()(SSL* s) const { SSL_free(s); }
};
using ssl_ptr = std::unique_ptr<SSL, ssl_free>;

// The error an SSL call's failure stands for: eof for a peer that closed (with or without
// close_notify), the socket's errno, or OpenSSL's first queued error (the queue is cleared).
error_code ssl_error(SSL* ssl, int ret);

class stream {
public:
    using executor_type = boost::asio::any_io_executor;

    explicit stream(tcp::socket s) : sock_(std::move(s)) {}
    stream(stream&&) = default;
    stream& operator=(stream&&) = default;
    ~stream();

    executor_type get_executor() { return sock_.get_executor(); }
    tcp::socket& socket() { return sock_; }
    const tcp::socket& socket() const { return sock_; }
    bool is_open() const { return sock_.is_open(); }

    // TLS from now on, through `ssl` (made from a context, its role set); the handshake
    // is async_handshake's. The descriptor is the socket's.
    void start_tls(ssl_ptr ssl);
    bool secure() const { return ssl_ != nullptr; }
    SSL* ssl() const { return ssl_.get(); }
    // Bytes OpenSSL has decrypted and not yet handed out (0 on a plain stream).
    std::size_t pending() const { return ssl_ ? static_cast<std::size_t>(SSL_pending(ssl_.get())) : 0; }

    template <class Token>
    auto async_handshake(Token&& token) {
        return run(std::forward<Token>(token), [](SSL* s, std::size_t&) { return SSL_do_handshake(s); });
    }

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        if (!ssl_) return sock_.async_read_some(buffers, std::forward<Token>(token));
        const auto b = first_of<boost::asio::mutable_buffer>(buffers);
        return run(std::forward<Token>(token), [b](SSL* s, std::size_t& n) {
            if (b.size() == 0) return 1;
            return SSL_read_ex(s, b.data(), b.size(), &n);
        });
    }

    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        if (!ssl_) return sock_.async_write_some(buffers, std::forward<Token>(token));
        const auto b = first_of<boost::asio::const_buffer>(buffers);
        return run(std::forward<Token>(token), [b](SSL* s, std::size_t& n) {
            if (b.size() == 0) return 1;
            return SSL_write_ex(s, b.data(), b.size(), &n);
        });
    }

    // Completes, consuming nothing, once a byte of data can be read (n = 1), or at the end or
    // an error: a one-byte MSG_PEEK receive on a plain stream; on TLS an SSL_peek, so that
    // records that carry no data (a TLS 1.3 server's session tickets after the handshake)
    // are taken in and waited past, not mistaken for an answer. `byte` must outlive it.
    template <class Token>
    auto async_wait_data(char& byte, Token&& token) {
        if (!ssl_)
            return sock_.async_receive(boost::asio::buffer(&byte, 1), tcp::socket::message_peek,
                                       std::forward<Token>(token));
        return run(std::forward<Token>(token),
                   [&byte](SSL* s, std::size_t& n) { return SSL_peek_ex(s, &byte, 1, &n); });
    }

    // A read that never waits: would_block when nothing is there yet. On TLS, the
    // socket's readability says nothing until this has failed so (OpenSSL may hold bytes).
    std::size_t read_some_now(boost::asio::mutable_buffer b, error_code& ec);

    // Sends what ends our side: close_notify on TLS (once, without waiting: a peer that
    // does not read it loses nothing it asked for), then the TCP shutdown of sending.
    void shutdown_send();
    void close();

private:
    // An SSL call takes one buffer: the first non-empty one of a sequence (a partial
    // read or write is what the caller asked for).
    template <class Buffer, class Sequence>
    static Buffer first_of(const Sequence& seq) {
        const auto end = boost::asio::buffer_sequence_end(seq);
        for (auto it = boost::asio::buffer_sequence_begin(seq); it != end; ++it) {
            Buffer b(*it);
            if (b.size() > 0) return b;
        }
        return Buffer();
    }

    // One SSL call, repeated as the socket becomes ready until it succeeds or fails. The
    // result never comes from inside the initiating call (posted instead), as asio asks.
    template <class Call>
    struct op {
        stream& s;
        Call call;
        bool started = false;

        template <class Self>
        void operator()(Self& self, error_code ec = {}, std::size_t = 0) {
            if (ec == boost::asio::error::operation_aborted) return self.complete(ec, 0);
            std::size_t n = 0;
            ERR_clear_error();  // SSL_get_error reads the thread's queue: nothing stale in it
            const int r = call(s.ssl_.get(), n);
            if (r > 0) return finish(self, {}, n);
            switch (SSL_get_error(s.ssl_.get(), r)) {
                case SSL_ERROR_WANT_READ:
                    started = true;
                    // The byte is the stream's: the op moves with `self`.
                    s.sock_.async_receive(boost::asio::buffer(&s.peeked_, 1), tcp::socket::message_peek,
                                          std::move(self));
                    return;
                case SSL_ERROR_WANT_WRITE:
                    started = true;
                    s.sock_.async_wait(tcp::socket::wait_write, std::move(self));
                    return;
                default: return finish(self, ssl_error(s.ssl_.get(), r), 0);
            }
        }

        template <class Self>
        void finish(Self& self, error_code ec, std::size_t n) {
            if (started) return self.complete(ec, n);
            boost::asio::post(s.sock_.get_executor(),
                              [self = std::move(self), ec, n]() mutable { self.complete(ec, n); });
        }
    };

    template <class Token, class Call>
    auto run(Token&& token, Call call) {
        return boost::asio::async_compose<Token, void(error_code, std::size_t)>(op<Call>{*this, std::move(call)}, token,
                                                                                sock_);
    }

    tcp::socket sock_;
    ssl_ptr ssl_;
    char peeked_ = 0;  // where a readability wait's peeked byte lands (never read)
};

}  // namespace sluice::tls
