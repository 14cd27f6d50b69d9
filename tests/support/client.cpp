#include "client.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace sluice::test {

namespace {

namespace http = boost::beast::http;
using error_code = boost::system::error_code;
using clock = std::chrono::steady_clock;

constexpr std::size_t io_chunk = 65536;
constexpr std::size_t prefix_limit = 65536;

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; };
               return lower(x) == lower(y);
           });
}

std::string sys_error(const std::string& what, int err) { return what + ": " + std::strerror(err); }

// Milliseconds left until `deadline` for poll(), rounded up so a wait never ends early; 0 if past.
int remaining_ms(clock::time_point deadline) {
    auto left = deadline - clock::now();
    if (left <= clock::duration::zero()) return 0;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return static_cast<int>(std::min<long long>(ms, 1'000'000'000));
}

// Waits for `events` on fd until deadline. Returns revents, 0 on timeout.
short wait_fd(int fd, short events, clock::time_point deadline) {
    for (;;) {
        pollfd p{fd, events, 0};
        int r = ::poll(&p, 1, remaining_ms(deadline));
        if (r > 0) return p.revents;
        if (r == 0) return 0;
        if (errno != EINTR) throw std::runtime_error(sys_error("poll", errno));
    }
}

// Binds `fd` to the IP literal `source` (any port) before it connects.
bool bind_source(int fd, int family, const std::string& source) {
    if (family == AF_INET) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        if (::inet_pton(AF_INET, source.c_str(), &a.sin_addr) != 1) return errno = EINVAL, false;
        return ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    if (::inet_pton(AF_INET6, source.c_str(), &a.sin6_addr) != 1) return errno = EINVAL, false;
    return ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

int connect_to(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout,
               const std::string& source) {
    const auto deadline = clock::now() + timeout;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string port_s = std::to_string(port);
    if (int rc = ::getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res); rc != 0)
        throw std::runtime_error("connect " + host + ":" + port_s + ": " + ::gai_strerror(rc));
    std::string last_error = "no address";
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last_error = std::strerror(errno);
            continue;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (!source.empty() && !bind_source(fd, ai->ai_family, source)) {
            last_error = "bind " + source + ": " + std::strerror(errno);
            ::close(fd);
            continue;
        }
        int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            short ev = wait_fd(fd, POLLOUT, deadline);
            if (ev == 0) {
                ::close(fd);
                ::freeaddrinfo(res);
                throw std::runtime_error("connect " + host + ":" + port_s + ": timeout");
            }
            int err = 0;
            socklen_t len = sizeof err;
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            rc = err == 0 ? 0 : -1;
            errno = err;
        }
        if (rc == 0) {
            ::freeaddrinfo(res);
            return fd;
        }
        last_error = std::strerror(errno);
        ::close(fd);
    }
    ::freeaddrinfo(res);
    throw std::runtime_error("connect " + host + ":" + port_s + ": " + last_error);
}

// Sends as much of `data` as the socket takes now. Returns bytes sent; -1 with errno on error.
ssize_t send_now(int fd, std::string_view data) {
    for (;;) {
        ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return -1;
    }
}

const std::string& upload_pattern() {
    static const std::string p = [] {
        std::string s(io_chunk + 26, '\0');
        for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>('a' + i % 26);
        return s;
    }();
    return p;
}

// A response parser that keeps the header but only counts, sums and samples the body.
class counting_parser : public http::basic_parser<false> {
public:
    int status = 0;
    int version = 0;
    header_list headers;
    std::uint64_t body_bytes = 0;
    std::uint64_t body_sum = 0;
    std::string body_prefix;

private:
    void consume(std::string_view data) {
        body_bytes += data.size();
        std::uint64_t sum = 0;
        for (unsigned char c : data) sum += c;
        body_sum += sum;
        if (body_prefix.size() < prefix_limit) body_prefix.append(data.substr(0, prefix_limit - body_prefix.size()));
    }
    void on_request_impl(http::verb, boost::beast::string_view, boost::beast::string_view, int, error_code&) override {}
    void on_response_impl(int code, boost::beast::string_view, int ver, error_code&) override {
        status = code;
        version = ver;
    }
    void on_field_impl(http::field, boost::beast::string_view name, boost::beast::string_view value,
                       error_code&) override {
        headers.emplace_back(std::string(name), std::string(value));
    }
    void on_header_impl(error_code&) override {}
    void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
    std::size_t on_body_impl(boost::beast::string_view data, error_code&) override {
        consume(data);
        return data.size();
    }
    void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code&) override {}
    std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view data, error_code&) override {
        consume(data);
        return data.size();
    }
    void on_finish_impl(error_code&) override {}
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// response

std::string response::header(std::string_view name) const {
    for (const auto& [n, v] : headers)
        if (iequals(n, name)) return v;
    return "";
}

bool response::has_header(std::string_view name) const { return count_header(name) > 0; }

std::size_t response::count_header(std::string_view name) const {
    return static_cast<std::size_t>(
        std::count_if(headers.begin(), headers.end(), [&](const auto& h) { return iequals(h.first, name); }));
}

// ---------------------------------------------------------------------------------------------
// connection

connection::connection(std::string host, std::uint16_t port, std::chrono::milliseconds timeout, std::string source)
    : fd_(connect_to(host, port, timeout, source)), timeout_(timeout) {}

connection::~connection() { close(); }

connection::connection(connection&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), timeout_(other.timeout_), in_(std::move(other.in_)) {}

connection& connection::operator=(connection&& other) noexcept {
    if (this != &other) {
        close();
        fd_ = std::exchange(other.fd_, -1);
        timeout_ = other.timeout_;
        in_ = std::move(other.in_);
    }
    return *this;
}

void connection::close() {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

void connection::send(std::string_view raw) {
    const auto deadline = clock::now() + timeout_;
    while (!raw.empty()) {
        ssize_t n = send_now(fd_, raw);
        if (n < 0) throw std::runtime_error(sys_error("send", errno));
        raw.remove_prefix(static_cast<std::size_t>(n));
        if (raw.empty()) break;
        if (n == 0 && wait_fd(fd_, POLLOUT, deadline) == 0)
            throw std::runtime_error("send: timeout after " + std::to_string(timeout_.count()) + " ms");
    }
}

std::size_t connection::read_some(clock::time_point deadline) {
    char buf[io_chunk];
    for (;;) {
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n > 0) {
            in_.append(buf, static_cast<std::size_t>(n));
            return static_cast<std::size_t>(n);
        }
        if (n == 0) return 0;
        if (errno == EINTR) continue;
        if (errno == ECONNRESET) return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK) throw std::runtime_error(sys_error("recv", errno));
        if (wait_fd(fd_, POLLIN, deadline) == 0)
            throw std::runtime_error("read: timeout after " + std::to_string(timeout_.count()) +
                                     " ms; unparsed bytes so far: " + std::to_string(in_.size()));
    }
}

response connection::read_response(bool head_request) {
    const auto deadline = clock::now() + timeout_;
    http::response_parser<http::string_body> p;
    p.body_limit(boost::none);
    p.header_limit(1024 * 1024);
    p.eager(true);
    if (head_request) p.skip(true);

    bool eof = false;
    for (;;) {
        if (!in_.empty()) {
            error_code ec;
            std::size_t used = p.put(boost::asio::buffer(in_), ec);
            in_.erase(0, used);
            if (ec && ec != http::error::need_more)
                throw std::runtime_error("read_response: parse error: " + ec.message());
            if (p.is_done()) break;
            if (!ec && used > 0) continue;
        }
        if (eof) {
            error_code ec;
            if (!p.got_some()) throw std::runtime_error("read_response: connection closed before any response");
            p.put_eof(ec);
            if (!ec && p.is_done()) break;
            throw std::runtime_error("read_response: connection closed before the response was complete");
        }
        if (read_some(deadline) == 0) eof = true;
    }

    auto& msg = p.get();
    response r;
    r.status = static_cast<int>(msg.result_int());
    r.version = static_cast<int>(msg.version());
    for (const auto& f : msg) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    r.body = std::move(msg.body());
    return r;
}

bool connection::wait_closed(std::chrono::milliseconds timeout) {
    const auto deadline = clock::now() + timeout;
    in_.clear();
    char buf[io_chunk];
    for (;;) {
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n == 0) return true;
        if (n > 0) continue;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return true;  // reset or other failure: closed
        if (wait_fd(fd_, POLLIN, deadline) == 0) return false;
    }
}

std::string connection::read_available(std::chrono::milliseconds timeout) {
    if (in_.empty()) {
        const auto deadline = clock::now() + timeout;
        char buf[io_chunk];
        for (;;) {
            ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n > 0) {
                in_.append(buf, static_cast<std::size_t>(n));
                continue;  // take everything that is already there
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && in_.empty()) {
                if (wait_fd(fd_, POLLIN, deadline) == 0) break;
                continue;
            }
            break;  // EOF, error, or no more data right now
        }
    }
    return std::exchange(in_, std::string());
}

void connection::shutdown_write() { ::shutdown(fd_, SHUT_WR); }

// ---------------------------------------------------------------------------------------------
// helpers

std::string make_request(std::string method, std::string target, header_list headers, std::string body) {
    bool has_host = false, has_length = false;
    for (const auto& [n, v] : headers) {
        if (iequals(n, "Host")) has_host = true;
        if (iequals(n, "Content-Length") || iequals(n, "Transfer-Encoding")) has_length = true;
    }
    std::string out = method + " " + target + " HTTP/1.1\r\n";
    if (!has_host) out += "Host: test\r\n";
    for (const auto& [n, v] : headers) out += n + ": " + v + "\r\n";
    if (!body.empty() && !has_length) out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += "\r\n";
    out += body;
    return out;
}

response fetch(std::uint16_t port, std::string method, std::string target, header_list headers, std::string body) {
    connection c("127.0.0.1", port);
    const bool head = method == "HEAD";
    c.send(make_request(std::move(method), std::move(target), std::move(headers), std::move(body)));
    return c.read_response(head);
}

std::uint64_t pattern_sum(std::uint64_t n) {
    constexpr std::uint64_t cycle = 26 * 97 + 325;  // 'a' + ... + 'z'
    const std::uint64_t r = n % 26;
    return (n / 26) * cycle + r * 97 + r * (r - 1) / 2;
}

transfer_result stream_request(std::uint16_t port, std::string method, std::string target, std::uint64_t upload_bytes,
                               bool chunked_upload, header_list headers, std::chrono::milliseconds idle_timeout) {
    connection c("127.0.0.1", port, idle_timeout);
    const int fd = c.fd();
    const bool head = method == "HEAD";

    std::string out = method + " " + target + " HTTP/1.1\r\n";
    bool has_host = false;
    for (const auto& [n, v] : headers) {
        if (iequals(n, "Host")) has_host = true;
    }
    if (!has_host) out += "Host: test\r\n";
    for (const auto& [n, v] : headers) out += n + ": " + v + "\r\n";
    if (chunked_upload)
        out += "Transfer-Encoding: chunked\r\n";
    else if (upload_bytes > 0)
        out += "Content-Length: " + std::to_string(upload_bytes) + "\r\n";
    out += "\r\n";
    std::size_t out_off = 0;
    std::uint64_t body_queued = 0;
    bool terminator_queued = !chunked_upload;
    bool sending = true;

    // Next piece of the request into `out` once the previous one has been sent.
    auto refill = [&] {
        out.clear();
        out_off = 0;
        if (body_queued < upload_bytes) {
            const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(io_chunk, upload_bytes - body_queued));
            const std::string& p = upload_pattern();
            if (chunked_upload) {
                char line[32];
                int sl = std::snprintf(line, sizeof line, "%zx\r\n", len);
                out.append(line, static_cast<std::size_t>(sl));
            }
            out.append(p.data() + body_queued % 26, len);
            if (chunked_upload) out += "\r\n";
            body_queued += len;
        } else if (!terminator_queued) {
            out = "0\r\n\r\n";
            terminator_queued = true;
        }
    };

    auto make_parser = [&] {
        auto p = std::make_unique<counting_parser>();
        p->body_limit(boost::none);
        p->header_limit(1024 * 1024);
        p->eager(true);
        if (head) p->skip(true);
        return p;
    };
    auto parser = make_parser();
    std::string in;
    char buf[io_chunk];
    auto deadline = clock::now() + idle_timeout;

    auto result = [&] {
        transfer_result r;
        r.status = parser->status;
        r.body_bytes = parser->body_bytes;
        r.body_sum = parser->body_sum;
        r.body_prefix = std::move(parser->body_prefix);
        r.headers = std::move(parser->headers);
        return r;
    };
    auto describe = [&] {
        return " (uploaded " + std::to_string(body_queued) + "/" + std::to_string(upload_bytes) +
               " bytes, received status " + std::to_string(parser->status) + ", " + std::to_string(parser->body_bytes) +
               " body bytes)";
    };
    // Feeds buffered input to the parser. Returns true when the final response is complete.
    auto parse = [&]() -> bool {
        while (!in.empty()) {
            error_code ec;
            std::size_t used = parser->put(boost::asio::buffer(in), ec);
            in.erase(0, used);
            if (ec == http::error::need_more) return false;
            if (ec) throw std::runtime_error("stream_request: parse error: " + ec.message() + describe());
            if (parser->is_done()) {
                // Interim responses (100 Continue, 103 Early Hints) precede the real one.
                if (parser->status / 100 == 1 && parser->status != 101) {
                    parser = make_parser();
                    continue;
                }
                return true;
            }
            if (used == 0) return false;
        }
        return false;
    };

    for (;;) {
        if (sending && out_off == out.size()) {
            refill();
            if (out.empty()) sending = false;
        }
        pollfd pfd{fd, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
        int pr = ::poll(&pfd, 1, remaining_ms(deadline));
        if (pr < 0) {
            if (errno == EINTR) continue;
            throw std::runtime_error(sys_error("poll", errno));
        }
        if (pr == 0)
            throw std::runtime_error("stream_request: no progress for " + std::to_string(idle_timeout.count()) + " ms" +
                                     describe());
        bool progress = false;
        if (sending && (pfd.revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t n = send_now(fd, std::string_view(out).substr(out_off));
            if (n < 0) {
                sending = false;  // the peer is gone or refuses more; its response may still be readable
            } else if (n > 0) {
                out_off += static_cast<std::size_t>(n);
                progress = true;
            }
        }
        if (pfd.revents & (POLLIN | POLLERR | POLLHUP)) {
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n > 0) {
                in.append(buf, static_cast<std::size_t>(n));
                progress = true;
                if (parse()) return result();
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
                const int err = n == 0 ? 0 : errno;
                error_code ec;
                if (parser->got_some()) parser->put_eof(ec);
                if (parser->got_some() && !ec && parser->is_done()) return result();
                throw std::runtime_error("stream_request: connection " +
                                         std::string(err ? sys_error("failed", err) : "closed") +
                                         " before a complete response" + describe());
            }
        }
        if (progress) deadline = clock::now() + idle_timeout;
    }
}

}  // namespace sluice::test
