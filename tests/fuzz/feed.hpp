// Shared by the HTTP fuzz targets: drives a sluice::http parser the way server/session.cpp
// and proxy/relay.cpp do. Received bytes accumulate in a buffer, put() sees every
// unconsumed byte, eager(false) stops put() after the head, and the body sink's framing
// is chosen then. Also the transcript both request and response targets compare.
#pragma once

#include "check.hpp"
#include "http/message.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::fuzz {

namespace bhttp = boost::beast::http;
using framing = http::body_sink::framing;

// A split plan from the front of `data`: a byte n (low 3 bits), then n piece sizes
// (1..64) used in turn; n == 0 means one piece. Returns the pieces of the rest.
inline std::vector<std::string_view> take_pieces(std::string_view& data) {
    std::vector<std::size_t> sizes;
    std::size_t n = data.empty() ? 0 : static_cast<unsigned char>(data[0]) & 7u;
    if (!data.empty()) data.remove_prefix(1);
    for (; n > 0 && !data.empty(); --n, data.remove_prefix(1))
        sizes.push_back(static_cast<unsigned char>(data[0]) % 64u + 1);
    std::vector<std::string_view> pieces;
    for (std::size_t i = 0, at = 0; at < data.size(); ++i) {
        const std::size_t len = sizes.empty() ? data.size() : sizes[i % sizes.size()];
        pieces.push_back(data.substr(at, len));
        at += pieces.back().size();
    }
    return pieces;
}

template <bool IsRequest>
struct feeder {
    http::message_head head;
    http::body_sink sink;
    std::string out, buf;         // sink output; received but unconsumed bytes
    boost::beast::error_code ec;  // the first error other than need_more
    std::optional<http::parser<IsRequest>> p;
    std::uint32_t header_limit = IsRequest ? 16384 : 64 * 1024;  // session.cpp's limits
    boost::optional<std::uint64_t> body_limit = IsRequest ? boost::optional<std::uint64_t>(10 << 20) : boost::none;
    bool skip_body = false;                 // a response to HEAD
    framing body_mode = framing::identity;  // the sink's framing once the head is parsed
    bool header_done = false;

    // Starts the next message on the same connection; leftover bytes stay buffered.
    void restart() {
        p.emplace(head, sink);
        sink = http::body_sink{&out, framing::none, 0};
        p->eager(false);
        p->header_limit(header_limit);
        p->body_limit(boost::none);  // as the session: the parser's own limit_body() counts
        if (body_limit) p->limit_body(*body_limit);
        if (skip_body) p->skip(true);
        header_done = false;
    }

    // One read's worth of bytes. False once the message failed or is complete.
    bool push(std::string_view bytes) {
        buf.append(bytes);
        while (!ec && !p->is_done() && !buf.empty()) {
            const std::size_t n = p->put(boost::asio::buffer(buf), ec);
            check(n <= buf.size(), "put() consumed more than it was given");
            buf.erase(0, n);
            if (ec == bhttp::error::need_more) {
                ec = {};
                return true;
            }
            if (ec) return false;
            if (!header_done && p->is_header_done()) {
                header_done = true;
                check(p->framing() == http::framing_error::none, "a head with bad framing parsed OK");
                sink.mode = body_mode;
            }
            if (n == 0) return true;
        }
        return !ec && !p->is_done();
    }

    // The peer closed: what relay::pump does.
    void eof() {
        if (!ec && !p->is_done() && p->got_some()) p->put_eof(ec);
    }
};

// What the next hop would receive of a run's complete messages, and whether it failed.
struct transcript {
    std::string text;
    bool failed = false;

    template <bool IsRequest>
    void add(const feeder<IsRequest>& f) {
        const auto& h = f.head;
        if constexpr (IsRequest)
            text.append(h.method_text()).append(" ").append(h.target());
        else
            text.append(std::to_string(h.status)).append(" ").append(h.reason());
        text.append(" ").append(std::to_string(h.version)).append("\n");
        for (const auto& fl : h.fields()) text.append(h.name(fl)).append(":").append(h.value(fl)).append("\n");
        text.append(f.out).append("\n\n");
    }
};

// Feeds `pieces`, then EOF, to a fresh message on `f`, recording each complete message.
// check_head(f) runs whenever a head is parsed; next(f), after each complete message, may
// check it and says whether another message follows on the connection.
template <bool IsRequest, class CheckHead, class Next>
transcript drive(feeder<IsRequest>& f, const std::vector<std::string_view>& pieces, CheckHead check_head, Next next) {
    transcript t;
    f.restart();
    for (std::size_t i = 0; i <= pieces.size(); ++i) {
        bool more = false;
        if (i < pieces.size())
            more = f.push(pieces[i]);
        else
            f.eof();
        if (f.header_done) check_head(f);
        while (!more && !f.ec && f.p->is_done()) {
            t.add(f);
            if (!next(f)) return t;
            f.out.clear();
            f.restart();
            more = f.push({});
            if (f.header_done) check_head(f);
        }
        if (f.ec) {
            t.failed = true;
            return t;
        }
    }
    return t;
}

// Runs that saw the same bytes agree on every message both completed, and on all of them
// when neither failed (Beast defers some errors in a split head, so failures may differ).
inline void check_agree(const transcript& whole, const transcript& split) {
    const std::string& a = whole.text;
    const std::string& b = split.text;
    if (!whole.failed && !split.failed) check(a == b, "whole and split runs differ");
    check(a.size() <= b.size() ? b.starts_with(a) : a.starts_with(b), "whole and split runs disagree on a message");
}

}  // namespace sluice::fuzz
