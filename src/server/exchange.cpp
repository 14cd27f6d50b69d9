// The upstream exchange of a session: the request body read ahead or streamed, the
// upstream connection, the response relayed (or a tunnel after 101).
#include "server/session.hpp"

#include "base/every.hpp"
#include "base/text.hpp"
#include "http/async.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

#include <spdlog/spdlog.h>

#include <poll.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <optional>

namespace sluice::server {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;
using http::clock;
using proxy::body_framing;
using proxy::relay;
namespace fail = http::fail;

namespace {

// The cost a response's cost fields report: the largest value that is a plain decimal number
// (a second field cannot lower the first), taken up to max_cost. No such field: none.
std::optional<std::int64_t> reported_cost(const http::message_head& resp, const route::route& r) {
    std::optional<std::uint64_t> most;
    for (const auto& f : resp.fields()) {
        if (!boost::beast::iequals(resp.name(f), r.cost_header)) continue;
        const std::string_view value = resp.value(f);
        std::uint64_t n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec == std::errc::result_out_of_range)
            n = std::numeric_limits<std::uint64_t>::max();
        else if (ec != std::errc() || end != value.data() + value.size())
            continue;
        most = std::max(most.value_or(0), n);
    }
    if (!most) return std::nullopt;
    return static_cast<std::int64_t>(std::min<std::uint64_t>(*most, static_cast<std::uint64_t>(r.max_cost)));
}

awaitable<error_code> wait_readable(tls::stream& s) {
    char byte;
    auto [ec, n] = co_await s.async_wait_data(byte, http::use_tuple);
    // bytes, an end or an error: the upstream has something to say, heard by the read
    co_return ec == asio::error::operation_aborted ? ec : error_code{};
}

metrics::upstream_error error_kind(const error_code& ec) {
    return relay::is_timeout(ec) ? metrics::upstream_error::timeout : metrics::upstream_error::reset;
}

// Why a TLS handshake with the upstream failed (a certificate that does not verify is a
// setting to fix), at most once a second per worker: a broken upstream fails every request.
void log_tls_failure(const std::string& why) {
    thread_local clock::time_point last{};
    if (!base::due(last, std::chrono::seconds(1))) return;
    spdlog::warn("upstream TLS handshake failed: {}", why);
}

void append_chunk(std::string& out, std::string_view data) {
    base::append_hex(out, std::uint64_t{data.size()});
    out += "\r\n";
    out += data;
    out += "\r\n";
}

}  // namespace

awaitable<after> session::exchange() {
    auto& p = *parser_;
    auto length = p.content_length();
    auto framing = p.chunked() ? body_framing::chunked : length ? body_framing::length : body_framing::none;
    std::uint64_t size = length.value_or(0);
    const bool has_body = framing == body_framing::chunked || size > 0;
    // Only WebSocket: after a 101 nothing is limited, and h2c would carry any number of requests.
    upgrade_ = proxy::connection_tokens(head_).has("upgrade") &&
               boost::beast::iequals(head_.find(bhttp::field::upgrade), "websocket");
    req_.body_deadline = {clock::now() + cfg_->server.body_timeout, cfg_->server.body_min_rate};
    if (has_body && p.expect_continue() && head_.version >= 11) {
        if (co_await relay_.write_all(client_, "HTTP/1.1 100 Continue\r\n\r\n", cfg_->server.idle_timeout))
            co_return after::close;
    }
    if (has_body) {
        if (auto f = co_await read_body_ahead(framing, size)) co_return co_await respond(*f);
    }
    // The pool: the route's, or the default one for a request no route matches.
    const std::size_t pool_index = req_.route ? req_.route->upstream : snap_->default_pool;
    if (pool_index >= snap_->pools.size()) co_return co_await respond(fail::no_route);
    const auto& pool = snap_->pools[pool_index];
    // The pool's max_in_flight: a slot held from here to the end of the answer, all retries included.
    if (pool->cfg().max_in_flight > 0) {
        track_.ask_sweep();  // check_client_left(), while the request waits in the pool's queue
        const auto capped = co_await cap_.take(snap_, pool_index);
        track_.unask_sweep();
        switch (capped) {
            case upstream_cap::result::pass: break;
            case upstream_cap::result::busy: co_return co_await respond(fail::upstream_busy, "Retry-After: 1\r\n");
            case upstream_cap::result::store_down: co_return co_await respond(fail::store_down);
            case upstream_cap::result::left: co_return co_await respond(fail::client_gone);
        }
    }
    lane_ = w_.lane_of(pool.get());
    // A reload came since this request began: a lane of its own, without idle connections.
    if (!lane_) lane_ = std::make_shared<upstream::lane>(pool, client_.get_executor(), w_.metrics);
    lane_->count_request(clock::now());
    const auto hash = pool->cfg().balance == config::balance_kind::hash ? balance_hash() : 0;
    // A request may be sent again only if it is idempotent and whole in memory: to the same
    // server when a pooled connection turned out closed (the upstream's idle timeout, the
    // usual cause), to another when this one failed without a byte of answer.
    const bool idempotent = proxy::is_idempotent(head_.method) && p.is_done();
    std::array<const upstream::slot*, 12> tried{};
    std::size_t tries = 0;
    std::optional<failure> last;  // the failure of the attempt before, to be tried elsewhere
    bool stale_retried = false;
    bool replaying = false;  // the attempt goes on, on a new connection: no attempt more, no retry
    for (;;) {
        auto next = lane_->pick(hash, std::span(tried.data(), tries));
        if (!next) co_return co_await respond(last ? *last : fail::no_upstream);
        if (last && !replaying && !may_retry()) co_return co_await respond(*last);
        req_.early_answer = false;  // of this attempt: one before may have failed writing
        auto s = co_await connect_upstream(std::move(next), !replaying);
        replaying = false;
        if (!s.failed) {
            const bool replayable = idempotent && !stale_retried && up_->reused;
            s = co_await send_request(framing, size, replayable, idempotent);
            if (!s.retry && !s.failed) s = co_await read_response_head(replayable && !req_.early_answer, idempotent);
        }
        if (!s.retry && !s.failed) break;
        const upstream::slot* failed_on = slot_.get();
        release_upstream(false);
        if (s.retry) {
            stale_retried = true;
            replaying = true;
            continue;
        }
        if (!s.elsewhere || tries >= std::min<std::size_t>(lane_->owner().cfg().retries, tried.size()))
            co_return co_await respond(*s.failed);
        tried[tries++] = failed_on;
        last = s.failed;
    }
    co_return co_await relay_response();
}

bool session::may_retry() {
    auto& counters = lane_->counters();
    if (!lane_->take_retry(clock::now())) {
        counters.budget_exhausted.add();
        return false;
    }
    counters.retries.add();
    return true;
}

std::uint64_t session::balance_hash() const {
    const auto d = req_.who.user.empty() ? w_.hasher.hash("ip", req_.who.client.to_string())
                                         : w_.hasher.hash("user", req_.who.user);
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < 8; ++i) h = h << 8 | d[i];
    return h;
}

void session::server_failed() {
    if (!slot_) return;
    auto& srv = *slot_->srv;
    slot_->counters.failures.add();
    if (lane_->owner().failed(srv, clock::now()))
        spdlog::warn("upstream {}: server {} ejected after {} failures in a row", lane_->owner().name(), srv.label,
                     lane_->owner().cfg().health.eject_after);
}

void session::upstream_error(metrics::upstream_error e) {
    w_.metrics.upstream_failed(e);
    if (slot_) slot_->counters.errors[static_cast<std::size_t>(e)].add();
}

void session::server_answered(unsigned status) {
    if (!slot_) return;
    if (status >= 500) {
        slot_->counters.errors[metrics::server_error_5xx].add();
        server_failed();
    } else
        lane_->owner().succeeded(*slot_->srv);
}

// With request_buffering, reads the body into memory up to request_buffer_bytes, before
// any upstream connection is taken. A body read whole is sent with a Content-Length.
awaitable<std::optional<http::failure>> session::read_body_ahead(body_framing& framing, std::uint64_t& size) {
    if (!cfg_->proxy.request_buffering) co_return std::nullopt;
    auto& p = *parser_;
    const auto limit = cfg_->proxy.request_buffer_bytes;
    // Room for what will be read at once: doubling as it grows could hold twice as much.
    if (auto length = p.content_length())
        req_.body.reserve(std::min<std::uint64_t>(*length, limit + proxy::piece_size));
    auto r = co_await relay_.fill(p, client_, in_, req_.body_deadline, req_.body, limit);
    if (r.failed == proxy::pump_result::parse)
        co_return r.ec == bhttp::error::body_limit ? fail::too_large : fail::bad_body;
    if (r.failed == proxy::pump_result::read)
        co_return relay::is_timeout(r.ec) ? fail::body_timeout : fail::client_gone;
    if (p.is_done()) {
        framing = body_framing::length;
        size = req_.body.size();
    }
    co_return std::nullopt;
}

awaitable<session::step> session::connect_upstream(std::shared_ptr<upstream::slot> to, bool new_attempt) {
    slot_ = std::move(to);
    req_.upstream = &lane_->owner();
    req_.upstream_addr = slot_->srv->address;
    if (new_attempt) ++req_.attempts;
    ++slot_->in_flight;
    slot_->counters.in_flight.add();
    slot_->counters.requests.add();
    up_ = slot_->idle.take();
    if (up_) {
        track_.watch_upstream(&up_->stream.socket());
        co_return step{};
    }
    const auto& cfg = lane_->owner().cfg();
    const auto& srv = *slot_->srv;
    up_ = std::make_unique<proxy::upstream_connection>(client_.get_executor());
    track_.watch_upstream(&up_->stream.socket());
    auto ec = co_await relay_.connect(*up_, srv.endpoint, cfg.connect_timeout);
    const auto& tls = snap_->upstream_tls[static_cast<std::size_t>(&cfg - snap_->cfg->upstreams.data())];
    if (!ec && srv.url.tls) {
        // An https server: the handshake has a connect_timeout of its own.
        auto ssl = tls->make_ssl(slot_->sessions, srv.url.host);
        ec = co_await relay_.handshake(*up_, std::move(ssl), cfg.connect_timeout);
        if (ec && !relay::is_timeout(ec)) {
            log_tls_failure(tls::handshake_failure(up_->stream.ssl(), ec));
            server_failed();
            upstream_error(metrics::upstream_error::tls);
            co_return step{fail::upstream_tls, false, true};
        }
    }
    if (!ec) co_return step{};
    server_failed();
    if (relay::is_timeout(ec)) {
        upstream_error(metrics::upstream_error::connect_timeout);
        co_return step{fail::upstream_connect_timeout, false, true};
    }
    upstream_error(ec == asio::error::connection_refused ? metrics::upstream_error::connect_refused
                                                         : metrics::upstream_error::connect_failed);
    co_return step{fail::upstream_refused, false, true};
}

// Sends the head and the body. An upstream that answers before it has taken the whole
// body (a 413, a 401) is heard: the send stops and its answer is relayed.
awaitable<session::step> session::send_request(body_framing framing, std::uint64_t size, bool replayable,
                                               bool idempotent) {
    using namespace asio::experimental::awaitable_operators;
    auto& p = *parser_;
    const auto& up_cfg = lane_->owner().cfg();
    const auto& url = slot_->srv->url;
    target_text_ = req_.target.path;
    target_text_ += req_.target.query;
    out_.clear();
    proxy::write_request_head(out_, head_,
                              {client_ip_, url.authority, url.base_path, upgrade_, target_text_, req_.target.authority,
                               req_.who.peer_trusted, client_.secure()},
                              framing, size);
    if (framing == body_framing::chunked && !req_.body.empty()) append_chunk(out_, req_.body);
    if (framing == body_framing::length) out_ += req_.body;
    // Streamed on: the read-ahead is in out_ now, and no retry will want it again.
    if (!p.is_done()) std::string().swap(req_.body);

    proxy::pump_result r;
    if (p.is_done()) {
        // All of it is in memory: one write. An upstream that answers early and closes
        // makes it fail, and is then heard below.
        r.ec = co_await relay_.write_all(up_->stream, out_, up_cfg.timeout);
        if (r.ec) r.failed = proxy::pump_result::write;
    } else {
        req_sink_.out = &out_;
        req_sink_.mode =
            framing == body_framing::chunked ? http::body_sink::framing::chunked : http::body_sink::framing::identity;
        auto sent = co_await (relay_.pump(p, client_, in_, cfg_->server.idle_timeout, &req_.body_deadline, up_->stream,
                                          up_cfg.timeout, out_) ||
                              wait_readable(up_->stream));
        if (sent.index() == 0) {
            r = std::get<0>(sent);
        } else if (auto ec = relay_.timed(std::get<1>(sent))) {
            r.failed = proxy::pump_result::write;  // the sweep cancelled a write the upstream did not take
            r.ec = ec;
        } else {
            req_.early_answer = true;
        }
    }
    out_.clear();
    switch (r.failed) {
        case proxy::pump_result::ok: co_return step{};
        case proxy::pump_result::parse:
            co_return step{r.ec == bhttp::error::body_limit ? fail::too_large : fail::bad_body};
        case proxy::pump_result::read: co_return step{relay::is_timeout(r.ec) ? fail::body_timeout : fail::client_gone};
        case proxy::pump_result::write:
            if (relay::is_timeout(r.ec)) {
                upstream_error(metrics::upstream_error::timeout);
                server_failed();
                co_return step{fail::upstream_send_timeout};
            }
            if (replayable) co_return step{std::nullopt, true};
            (void)idempotent;
            // It may have answered before it stopped reading: listen before giving up.
            req_.early_answer = true;
            co_return step{};
    }
    co_return step{};
}

// While the upstream's answer is awaited (or a slot of the pool's max_in_flight), a client that
// leaves (end of stream, or an error on its socket) has its request given up, as nginx does by
// default: the upstream read (or the wait) is cancelled. Asked of the worker's sweep (every tick, at most 100 ms), so
// that an upstream that answers sooner costs nothing; poll(POLLRDHUP) sees the end even behind a pipelined request's
// bytes not read yet, where a read (or a peek) would stop at those bytes.
void session::check_client_left() {
    pollfd p{client_.socket().native_handle(), POLLRDHUP, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        client_left_ = true;
        error_code ignored;
        if (up_) up_->stream.socket().cancel(ignored);
        if (cap_.waiting()) cap_.leave();
        return;
    }
    track_.ask_sweep();  // again at the next sweep
}

// Reads the final response head, relaying interim 1xx ones; one deadline covers them all.
awaitable<session::step> session::read_response_head(bool replayable, bool idempotent) {
    const auto asked = clock::now();
    const auto deadline = asked + lane_->owner().cfg().timeout;
    for (;;) {
        auto& rp = resp_parser_.emplace(resp_, resp_sink_);
        resp_sink_ = http::body_sink{&out_, http::body_sink::framing::none, 0};
        rp.eager(false);
        rp.header_limit(64 * 1024);
        rp.body_limit(boost::none);
        if (head_.method == bhttp::verb::head) rp.skip(true);
        bool got_some = false;
        client_left_ = false;
        track_.ask_sweep();  // check_client_left()
        auto ec = co_await relay_.read_head(rp, up_->stream, up_->buffer, deadline, got_some);
        track_.unask_sweep();
        if (client_left_) co_return step{fail::client_gone};
        req_.upstream_us = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - asked).count();
        if (ec) {
            if (!got_some && replayable && !relay::is_timeout(ec)) co_return step{std::nullopt, true};
            upstream_error(error_kind(ec));
            server_failed();
            if (relay::is_timeout(ec)) co_return step{fail::upstream_timeout};
            // No byte of answer: an idempotent request whole in memory may go elsewhere.
            const bool elsewhere = !got_some && idempotent;
            if (req_.early_answer && !got_some) co_return step{fail::upstream_send, false, elsewhere};
            if (got_some && ec != asio::error::eof && ec != asio::error::connection_reset)
                co_return step{fail::upstream_invalid};
            co_return step{fail::upstream_closed, false, elsewhere};
        }
        if (resp_.status >= 200 || resp_.status == 101) {
            lane_->counters().response.observe(metrics::duration_buckets, static_cast<double>(req_.upstream_us) / 1e6);
            server_answered(resp_.status);
            co_return step{};
        }
        if (head_.version < 11) continue;  // HTTP/1.0 clients get no interim responses
        out_.clear();
        proxy::write_response_head(out_, resp_, {.drop = cost_header()}, body_framing::none, 0);
        if (co_await relay_.write_all(client_, out_, cfg_->server.idle_timeout)) co_return step{fail::client_gone};
    }
}

awaitable<after> session::relay_response() {
    auto& rp = *resp_parser_;
    const unsigned status = resp_.status;
    if (status == 101) {
        if (!upgrade_) {
            release_upstream(false);
            co_return co_await respond(fail::upstream_unasked_101);
        }
        req_.status = 101;
        co_await settle(101);
        out_.clear();
        proxy::write_response_head(out_, resp_, {.upgrade = true}, body_framing::none, 0);
        if (!co_await relay_.write_all(client_, out_, cfg_->server.idle_timeout))
            co_await relay_.tunnel(client_, in_, *up_, cfg_->server.idle_timeout);
        release_upstream(false);
        co_return after::close;
    }

    const bool no_body = head_.method == bhttp::verb::head || status == 204 || status == 304;
    auto length = rp.content_length();
    const auto framing = no_body               ? body_framing::none
                         : length              ? body_framing::length
                         : head_.version >= 11 ? body_framing::chunked
                                               : body_framing::until_close;
    const bool keep = may_keep_alive() && framing != body_framing::until_close;
    // Settled now, before the client sees the head (a refund is in place for its next
    // request) or the body (a long response is not served on credit).
    if (!cost_header().empty()) req_.reported_cost = reported_cost(resp_, *req_.route);
    co_await settle(status);
    out_.clear();
    proxy::write_response_head(out_, resp_,
                               {.head_request = head_.method == bhttp::verb::head,
                                .keep_alive = keep,
                                .client_http10 = head_.version < 11,
                                .extra = req_.outcome.fields,
                                .drop = cost_header()},
                               framing, length.value_or(0));
    resp_sink_.mode = framing == body_framing::chunked ? http::body_sink::framing::chunked
                      : no_body                        ? http::body_sink::framing::none
                                                       : http::body_sink::framing::identity;
    req_.status = status;
    auto r = co_await relay_.pump(rp, up_->stream, up_->buffer, lane_->owner().cfg().timeout, nullptr, client_,
                                  cfg_->server.idle_timeout, out_);
    if (r.failed != proxy::pump_result::ok && r.failed != proxy::pump_result::write) upstream_error(error_kind(r.ec));
    // Pooled again only when the response ended exactly at its framing, after the whole
    // request went out (pool::give_back also wants nothing more buffered).
    release_upstream(r.failed == proxy::pump_result::ok && rp.keep_alive() && !req_.early_answer);
    // Closing by our own decision, the client may have sent more (a pipelined request, the
    // rest of a body): linger, or its unread bytes would reset the connection under the answer.
    const after done = keep ? after::keep_alive : after::linger;
    if (r.failed == proxy::pump_result::ok) co_return done;
    if (r.failed == proxy::pump_result::write) co_return after::close;  // the client went away
    if (r.written == 0)
        co_return co_await respond(relay::is_timeout(r.ec) ? fail::upstream_timeout : fail::upstream_cut);
    co_return after::close;  // the response was cut short: closing tells the client so
}

void session::release_upstream(bool reuse) {
    if (up_) {
        track_.watch_upstream(nullptr);
        if (reuse) slot_->idle.give_back(std::move(up_));
        up_.reset();
    }
    if (slot_) {
        --slot_->in_flight;
        slot_->counters.in_flight.sub();
        slot_.reset();
    }
}

}  // namespace sluice::server
