#include "server/proxy_header.hpp"

#include "base/async.hpp"
#include "identity/proxy_protocol.hpp"

#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <variant>

namespace sluice::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using metrics::proxy_refusal;

namespace {

// The first peek looks this far ahead: a whole v1 line, or a v2 header with a few TLVs.
constexpr std::size_t first_peek = 256;

// One step of reading the header without blocking.
struct step {
    enum class kind { header, wait, malformed, closed };
    static step of(kind k) { return {k, {}, {}}; }
    kind what = kind::wait;
    identity::proxy_header header;
    std::string_view reason;  // malformed
};

// Peeks at what the socket holds after the `taken` bytes already received, and receives
// the header's end, or every byte peeked while the header is still incomplete.
step take_some(int fd, std::string& taken, std::size_t& at_least) {
    const std::size_t old = taken.size();
    taken.resize(old + std::max(at_least, first_peek));
    const ssize_t n = ::recv(fd, taken.data() + old, taken.size() - old, MSG_PEEK | MSG_DONTWAIT);
    if (n <= 0) {
        taken.resize(old);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return step::of(step::kind::wait);
        return step::of(step::kind::closed);  // EOF or reset
    }
    const auto peeked = static_cast<std::size_t>(n);
    const auto parsed = identity::parse_proxy_header(std::string_view(taken.data(), old + peeked));
    // Receives `count` bytes already peeked: all there, so one recv takes them.
    const auto receive = [&](std::size_t count) {
        return ::recv(fd, taken.data() + old, count, MSG_DONTWAIT) == static_cast<ssize_t>(count);
    };
    if (const auto* h = std::get_if<identity::proxy_header>(&parsed)) {
        if (!receive(h->length - old)) return step::of(step::kind::closed);
        taken.resize(h->length);
        return {step::kind::header, *h, {}};
    }
    if (const auto* e = std::get_if<identity::proxy_error>(&parsed)) {
        taken.resize(old);
        return {step::kind::malformed, {}, e->reason};
    }
    if (!receive(peeked)) return step::of(step::kind::closed);
    taken.resize(old + peeked);
    at_least = std::get<identity::proxy_need_more>(parsed).at_least;
    return step::of(step::kind::wait);
}

}  // namespace

asio::awaitable<std::optional<identity::address>> read_proxy_header(worker& w, tcp::socket& socket,
                                                                    http::tracked_connection& track,
                                                                    identity::address peer) {
    const auto snap = w.snap;
    const auto& settings = snap->cfg->server.proxy_protocol;
    if (!settings) co_return peer;
    const auto refuse = [&](proxy_refusal r, std::string_view why) {
        if (!w.draining) w.metrics.proxy_protocol_refused(r);
        spdlog::debug("PROXY protocol: connection closed unanswered: {} ({})", metrics::to_string(r), why);
    };
    if (!snap->proxy_trusted.contains(peer)) {
        refuse(proxy_refusal::untrusted, "the peer is not in server.proxy_protocol.trusted");
        co_return std::nullopt;
    }
    track.arm(settings->header_timeout);
    std::string taken;
    std::size_t at_least = 1;
    for (;;) {
        const step s = take_some(socket.native_handle(), taken, at_least);
        switch (s.what) {
            case step::kind::header:
                co_return s.header.cmd == identity::proxy_header::command::proxy ? s.header.source : peer;
            case step::kind::malformed: refuse(proxy_refusal::malformed, s.reason); co_return std::nullopt;
            case step::kind::closed: refuse(proxy_refusal::closed, "the peer closed"); co_return std::nullopt;
            case step::kind::wait: break;
        }
        auto [ec] = co_await socket.async_wait(tcp::socket::wait_read, base::use_tuple);
        if (ec) {
            if (track.expired())
                refuse(proxy_refusal::timeout, "no whole header within server.proxy_protocol.header_timeout");
            else
                refuse(proxy_refusal::closed, ec.message());
            co_return std::nullopt;
        }
    }
}

}  // namespace sluice::server
