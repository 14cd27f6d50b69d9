#include "http/session.hpp"

#include "http/access_log.hpp"
#include "http/admission.hpp"
#include "http/message.hpp"
#include "limit/rules.hpp"
#include "proxy/headers.hpp"
#include "proxy/relay.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <optional>

namespace sluice::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;
using proxy::body_framing;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t upstream_header_limit = 64 * 1024;
constexpr auto linger_time = std::chrono::seconds(2);

bool is_timeout(const error_code& ec) { return ec == boost::beast::error::timeout; }

asio::ip::address peer_address(const tcp::socket& s) {
    error_code ec;
    auto ep = s.remote_endpoint(ec);
    if (ec) return {};
    return identity::normalize(ep.address());
}

metrics::upstream_error connect_error_kind(const error_code& ec) {
    if (is_timeout(ec)) return metrics::upstream_error::connect_timeout;
    if (ec == asio::error::connection_refused) return metrics::upstream_error::connect_refused;
    return metrics::upstream_error::connect_failed;
}


}  // namespace

std::string error_response(unsigned status, std::string_view code, std::string_view message, bool close) {
    boost::json::object body{{"error", code}, {"message", message}};
    auto text = boost::json::serialize(body);
    std::string out = "HTTP/1.1 ";
    out += std::to_string(status);
    out += ' ';
    out += boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
    out += "\r\nContent-Type: application/json\r\nContent-Length: ";
    out += std::to_string(text.size());
    out += close ? "\r\nConnection: close\r\n\r\n" : "\r\n\r\n";
    out += text;
    return out;
}

class session {
public:
    session(worker& w, tcp::socket s)
        : w_(w),
          snap_(w.snap),
          cfg_(snap_->cfg.get()),
          client_(std::move(s)),
          peer_(peer_address(client_)),
          client_ip_(peer_.to_string()) {}

    awaitable<void> run();

private:
    struct head_result {
        enum { ok, closed, error } kind = ok;
        unsigned status = 0;
        const char* code = "";
        const char* message = "";
    };

    awaitable<head_result> read_request_head();
    awaitable<bool> handle_request();
    awaitable<bool> forward(body_framing framing, std::uint64_t length, bool upgrade);
    enum class relay_outcome { close, keep_alive, retry };
    awaitable<relay_outcome> relay_response(proxy::upstream_connection& up, bool upgrade, bool may_retry, bool& reusable);
    awaitable<relay_outcome> fail_response(unsigned status, const char* code, const char* message) {
        co_return co_await fail(status, code, message, true) ? relay_outcome::keep_alive : relay_outcome::close;
    }
    static relay_outcome keep(bool keep_alive) { return keep_alive ? relay_outcome::keep_alive : relay_outcome::close; }
    awaitable<error_code> write_all(tcp::socket& s, std::string_view data, clock::duration timeout) {
        return relay_.write_all(s, data, timeout);
    }
    awaitable<bool> fail(unsigned status, const char* code, const char* message, bool keep_alive = false);
    awaitable<bool> reject_limited(const std::string& policy);
    awaitable<void> linger();
    void finish(unsigned status);


    worker& w_;
    std::shared_ptr<const snapshot> snap_;  // the snapshot the current request started with
    const config::config* cfg_;
    tcp::socket client_;
    asio::ip::address peer_;
    std::string client_ip_;
    admission admission_;
    outcome outcome_;
    std::size_t route_slot_ = 0;
    const limit::route* route_ = nullptr;
    clock::time_point upstream_asked_{};
    double upstream_ms_ = -1;
    boost::beast::flat_buffer in_;
    std::string out_;
    message_head req_, resp_;
    body_sink req_sink_, resp_sink_;
    std::optional<request_parser> req_parser_;
    std::optional<response_parser> resp_parser_;
    tracked_connection track_;
    proxy::relay relay_{track_};
    clock::time_point started_{};
    bool first_ = true;
    bool finished_ = false;
};

awaitable<void> serve(worker& w, tcp::socket socket) {
    session s(w, std::move(socket));
    co_await s.run();
}

awaitable<void> session::run() {
    w_.connections.add(track_);
    track_.watch(&client_, nullptr);
    w_.metrics.connection_opened();
    error_code ec;
    client_.set_option(tcp::no_delay(true), ec);
    for (;;) {
        auto head = co_await read_request_head();
        if (head.kind == head_result::closed) break;
        finished_ = false;
        if (head.kind == head_result::error) {
            co_await fail(head.status, head.code, head.message);
            break;
        }
        bool keep_alive = co_await handle_request();
        first_ = false;
        if (!keep_alive || w_.draining) break;
    }
    client_.close(ec);
    w_.metrics.connection_closed();
}

awaitable<session::head_result> session::read_request_head() {
    if (snap_ != w_.snap) {
        snap_ = w_.snap;
        cfg_ = snap_->cfg.get();
    }
    route_slot_ = snap_->unmatched_slot;
    route_ = nullptr;
    upstream_ms_ = -1;
    outcome_.reset();
    resp_sink_.bytes = 0;
    req_parser_.emplace(req_, req_sink_);
    req_sink_ = body_sink{&out_, body_sink::framing::none, 0};
    auto& p = *req_parser_;
    p.eager(false);
    p.header_limit(static_cast<std::uint32_t>(cfg_->server.max_header_bytes));
    p.body_limit(cfg_->server.max_body_bytes);

    // One deadline covers the whole head (a slowloris client cannot stretch it by
    // trickling bytes); before the first byte of a later request the idle timeout runs.
    bool got_some = in_.size() > 0;
    bool header_armed = got_some || first_;
    track_.idle = !got_some;
    track_.arm(header_armed ? cfg_->server.header_timeout : cfg_->server.idle_timeout);
    started_ = clock::now();
    for (;;) {
        if (in_.size() > 0) {
            error_code ec;
            auto n = p.put(in_.data(), ec);
            in_.consume(n);
            if (!ec && p.is_header_done()) co_return head_result{};
            if (ec && ec != bhttp::error::need_more) {
                if (ec == bhttp::error::body_limit)  // a declared Content-Length over the limit
                    co_return head_result{head_result::error, 413, "payload_too_large",
                                          "the request body exceeds server.max_body_bytes"};
                if (ec == bhttp::error::header_limit)
                    co_return head_result{head_result::error, 431, "header_too_large",
                                          "the request header exceeds server.max_header_bytes"};
                if (p.framing() != framing_error::none)
                    co_return head_result{head_result::error, 400, "bad_request",
                                          "ambiguous message framing: Transfer-Encoding must be exactly "
                                          "\"chunked\" and cannot be combined with Content-Length"};
                if (ec == bhttp::error::multiple_content_length || ec == bhttp::error::bad_content_length)
                    co_return head_result{head_result::error, 400, "bad_request", "invalid Content-Length"};
                if (ec == bhttp::error::bad_transfer_encoding)
                    co_return head_result{head_result::error, 400, "bad_request", "invalid Transfer-Encoding"};
                co_return head_result{head_result::error, 400, "bad_request", "malformed request"};
            }
        }
        auto [ec, n] = co_await client_.async_read_some(in_.prepare(proxy::piece_size), use_tuple);
        in_.commit(n);
        if (ec) {
            if (got_some && is_timeout(relay_.timed(ec)))
                co_return head_result{head_result::error, 408, "request_timeout",
                                      "the request header did not arrive within server.header_timeout"};
            co_return head_result{head_result::closed};
        }
        if (!got_some && n > 0) {
            got_some = true;
            track_.idle = false;
            started_ = clock::now();
            if (!header_armed) track_.arm(cfg_->server.header_timeout);
            header_armed = true;
        }
    }
}

awaitable<bool> session::handle_request() {
    auto& p = *req_parser_;
    if (req_.version >= 11 && req_.count(bhttp::field::host) != 1)
        co_return co_await fail(400, "bad_request", "an HTTP/1.1 request needs exactly one Host field");
    if (p.has_expect() && !p.expect_continue())
        co_return co_await fail(417, "expectation_failed", "only Expect: 100-continue is supported");
    auto length = p.content_length();
    if (length && *length > cfg_->server.max_body_bytes)
        co_return co_await fail(413, "payload_too_large", "the request body exceeds server.max_body_bytes");

    const limit::route* route = snap_->rules.match(req_.method_text(), req_.find(bhttp::field::host), req_.target());
    route_ = route;
    if (route) route_slot_ = route->metric_slot;
    if (route && route->limits && admission_.prepare(*snap_, *route, req_, peer_, w_.hasher, outcome_)) {
        const auto asked = clock::now();
        auto result = w_.store.try_check(admission_.request());
        if (!result) result = co_await w_.store.check(admission_.request());
        w_.metrics.store_called(std::chrono::duration<double>(clock::now() - asked).count());
        admission_.conclude(*snap_, *route, *result, w_.metrics, outcome_);
    }
    switch (outcome_.what) {
        case outcome::kind::pass: break;
        case outcome::kind::limited: co_return co_await reject_limited(route->limits->name);
        case outcome::kind::unauthorized:
            w_.metrics.unauthorized();
            co_return co_await fail(401, "unauthorized", outcome_.reason.c_str(), true);
        case outcome::kind::store_down:
            co_return co_await fail(503, "store_unavailable",
                                    "the rate-limit store cannot be reached and store.on_error is deny", true);
    }

    body_framing framing = p.chunked() ? body_framing::chunked : length ? body_framing::length : body_framing::none;
    bool upgrade = proxy::connection_tokens(req_).has("upgrade") && req_.count(bhttp::field::upgrade) > 0;
    co_return co_await forward(framing, length.value_or(0), upgrade);
}

awaitable<bool> session::forward(body_framing framing, std::uint64_t length, bool upgrade) {
    auto& p = *req_parser_;
    const auto& up_cfg = cfg_->upstream;
    const bool has_body = framing == body_framing::chunked || length > 0;
    // A request may be sent again only if it is idempotent and no byte of its body was
    // consumed; an upstream that closed a pooled connection while idle is the usual cause.
    const bool retriable = !has_body && proxy::is_idempotent(req_.method);
    bool retried = false;
    proxy::request_context ctx{client_ip_, up_cfg.url.authority, up_cfg.url.base_path, upgrade};

    auto up = w_.pool.take();
    for (;;) {
        if (!up) {
            up = std::make_unique<proxy::upstream_connection>(client_.get_executor());
            auto ec = co_await relay_.connect(*up, w_.upstream_endpoints, up_cfg.connect_timeout);
            if (ec) {
                w_.metrics.upstream_failed(connect_error_kind(ec));
                if (is_timeout(ec))
                    co_return co_await fail(502, "upstream_unavailable", "connecting to the upstream timed out", !has_body);
                co_return co_await fail(502, "upstream_unavailable", "the upstream refused or failed the connection",
                                        !has_body);
            }
        }
        track_.watch_upstream(&up->socket);

        out_.clear();
        proxy::write_request_head(out_, req_, ctx, framing, length);
        error_code ec;
        if (has_body) {
            if (p.expect_continue() && req_.version >= 11) {
                ec = co_await write_all(client_, "HTTP/1.1 100 Continue\r\n\r\n", cfg_->server.idle_timeout);
                if (ec) co_return false;
            }
            req_sink_.mode = framing == body_framing::chunked ? body_sink::framing::chunked : body_sink::framing::identity;
            auto r = co_await relay_.pump(p, client_, in_, cfg_->server.idle_timeout, up->socket, up_cfg.timeout, out_);
            if (r.failed == proxy::pump_result::parse) {
                if (r.ec == bhttp::error::body_limit)
                    co_return co_await fail(413, "payload_too_large", "the request body exceeds server.max_body_bytes");
                co_return co_await fail(400, "bad_request", "malformed request body");
            }
            if (r.failed == proxy::pump_result::read) {
                if (is_timeout(r.ec))
                    co_return co_await fail(408, "request_timeout", "the request body stopped arriving");
                co_return false;
            }
            if (r.failed == proxy::pump_result::write) {
                w_.metrics.upstream_failed(is_timeout(r.ec) ? metrics::upstream_error::timeout
                                                            : metrics::upstream_error::reset);
                co_return co_await fail(is_timeout(r.ec) ? 504 : 502, "upstream_unavailable",
                                        "the upstream stopped reading the request body");
            }
        } else {
            ec = co_await write_all(up->socket, out_, up_cfg.timeout);
            out_.clear();
        }

        if (!ec) {
            bool reusable = false;
            auto o = co_await relay_response(*up, upgrade, up->reused && retriable && !retried, reusable);
            if (o != relay_outcome::retry) {
                if (reusable) w_.pool.give_back(std::move(up));
                co_return o == relay_outcome::keep_alive;
            }
        } else if (!(up->reused && retriable && !retried)) {
            w_.metrics.upstream_failed(is_timeout(ec) ? metrics::upstream_error::timeout : metrics::upstream_error::reset);
            co_return co_await fail(is_timeout(ec) ? 504 : 502, "upstream_unavailable",
                                    "sending the request to the upstream failed", true);
        }
        retried = true;
        up.reset();
    }
}

// Reads the upstream's answer and relays it. Answers retry, having sent nothing, when
// may_retry and the upstream closed before any byte of a response.
awaitable<session::relay_outcome> session::relay_response(proxy::upstream_connection& up, bool upgrade, bool may_retry,
                                                    bool& reusable) {
    auto& p = *req_parser_;
    const auto& up_cfg = cfg_->upstream;
    auto& rp = resp_parser_.emplace(resp_, resp_sink_);
    for (;;) {
        resp_sink_ = body_sink{&out_, body_sink::framing::none, 0};
        rp.eager(false);
        rp.header_limit(upstream_header_limit);
        rp.body_limit(boost::none);
        if (req_.method == bhttp::verb::head) rp.skip(true);
        bool got_some = false;
        if (upstream_ms_ < 0) upstream_asked_ = clock::now();
        auto ec = co_await relay_.read_head(rp, up.socket, up.buffer, up_cfg.timeout, got_some);
        upstream_ms_ = std::chrono::duration<double, std::milli>(clock::now() - upstream_asked_).count();
        if (ec) {
            if (!got_some && may_retry && !is_timeout(ec)) co_return relay_outcome::retry;
            w_.metrics.upstream_failed(is_timeout(ec) ? metrics::upstream_error::timeout : metrics::upstream_error::reset);
            if (is_timeout(ec))
                co_return co_await fail_response(504, "upstream_timeout", "the upstream did not answer within upstream.timeout");
            if (got_some && ec != asio::error::eof && ec != asio::error::connection_reset)
                co_return co_await fail_response(502, "bad_gateway", "the upstream sent an invalid response");
            co_return co_await fail_response(502, "upstream_unavailable", "the upstream closed the connection without a response");
        }
        if (resp_.status >= 200 || resp_.status == 101) break;
        // An interim response (103 Early Hints, ...): relay it and read the final one.
        if (req_.version >= 11) {
            out_.clear();
            proxy::write_response_head(out_, resp_, {}, body_framing::none, 0);
            ec = co_await write_all(client_, out_, cfg_->server.idle_timeout);
            if (ec) co_return relay_outcome::close;
        }
        resp_parser_.emplace(resp_, resp_sink_);  // rp now names the new parser
    }

    const unsigned status = resp_.status;
    if (status == 101) {
        if (!upgrade) co_return co_await fail_response(502, "bad_gateway", "the upstream switched protocols unasked");
        out_.clear();
        proxy::write_response_head(out_, resp_, {.upgrade = true}, body_framing::none, 0);
        auto ec = co_await write_all(client_, out_, cfg_->server.idle_timeout);
        finish(101);
        if (!ec) co_await relay_.tunnel(client_, in_, up, cfg_->server.idle_timeout);
        co_return relay_outcome::close;
    }

    const bool no_body = req_.method == bhttp::verb::head || status == 204 || status == 304;
    auto length = rp.content_length();
    body_framing framing = no_body ? body_framing::none
                           : length ? body_framing::length
                           : req_.version >= 11 ? body_framing::chunked
                                                : body_framing::until_close;
    const bool keep_alive = p.is_done() && p.keep_alive() && !w_.draining && framing != body_framing::until_close;
    out_.clear();
    proxy::write_response_head(out_, resp_,
                               {.head_request = req_.method == bhttp::verb::head,
                                .keep_alive = keep_alive,
                                .client_http10 = req_.version < 11,
                                .extra = outcome_.fields},
                               framing, length.value_or(0));
    resp_sink_.mode = framing == body_framing::chunked ? body_sink::framing::chunked
                      : no_body                        ? body_sink::framing::none
                                                       : body_sink::framing::identity;
    auto r = co_await relay_.pump(rp, up.socket, up.buffer, up_cfg.timeout, client_, cfg_->server.idle_timeout, out_);
    if (r.failed == proxy::pump_result::ok) {
        finish(status);
        reusable = rp.keep_alive() && up.buffer.size() == 0;
        co_return keep(keep_alive);
    }
    if (r.failed == proxy::pump_result::write) {
        finish(status);
        co_return relay_outcome::close;  // the client went away
    }
    w_.metrics.upstream_failed(is_timeout(r.ec) ? metrics::upstream_error::timeout : metrics::upstream_error::reset);
    if (r.written == 0) {
        co_await fail(is_timeout(r.ec) ? 504 : 502, "upstream_unavailable",
                      "the upstream failed while sending its response");
        co_return relay_outcome::close;
    }
    finish(status);  // the response was cut short: closing tells the client so
    co_return relay_outcome::close;
}

void session::finish(unsigned status) {
    if (finished_) return;
    finished_ = true;
    auto seconds = std::chrono::duration<double>(clock::now() - started_).count();
    w_.metrics.request_done(route_slot_, status, seconds);
    if (!w_.access) return;
    access_record r;
    r.peer = client_ip_;
    r.method = req_.method_text();
    r.path = limit::target_path(req_.target());
    r.route = route_ ? std::string_view(route_->name) : std::string_view("unmatched");
    r.policy = route_ && route_->limits ? std::string_view(route_->limits->name) : std::string_view();
    r.decision = outcome_.decision;
    r.id_kind = outcome_.id_kind == 'u' ? "user" : outcome_.id_kind == 'i' ? "ip" : "";
    if (outcome_.id_kind) r.id = identity::hasher::to_hex(outcome_.id);
    r.status = status;
    r.bytes_in = req_sink_.bytes;
    r.bytes_out = resp_sink_.bytes;
    r.upstream_us = upstream_ms_ < 0 ? -1 : static_cast<std::int64_t>(upstream_ms_ * 1e3);
    r.total_us = static_cast<std::int64_t>(seconds * 1e6);
    w_.access->write(r);
}

// Sends an error answer. Unless keep_alive (and the request was read whole), the
// connection is then closed gracefully: the client gets the answer even while it is
// still sending a body we will not read.
awaitable<bool> session::fail(unsigned status, const char* code, const char* message, bool keep_alive) {
    keep_alive = keep_alive && req_parser_ && req_parser_->is_done() && req_parser_->keep_alive() && !w_.draining;
    auto text = error_response(status, code, message, !keep_alive);
    finish(status);
    auto ec = co_await write_all(client_, text, cfg_->server.header_timeout);
    if (ec) co_return false;
    if (!keep_alive) co_await linger();
    co_return keep_alive;
}

// 429 with Retry-After, the rate-limit fields and a JSON reason. The connection stays open
// when the request was read whole (it had no body); otherwise it is closed gracefully.
awaitable<bool> session::reject_limited(const std::string& policy) {
    const bool keep_alive = req_parser_->is_done() && req_parser_->keep_alive() && !w_.draining;
    // Policy names are [a-z0-9_-] (config validation): the body needs no escaping.
    const auto retry = std::to_string(outcome_.retry_after_s);
    std::string body = R"({"error":"rate_limited","policy":")";
    body += policy;
    body += R"(","retry_after":)";
    body += retry;
    body += '}';
    out_.clear();
    out_ += "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: ";
    out_ += retry;
    out_ += "\r\n";
    out_ += outcome_.fields;
    out_ += "Content-Length: ";
    out_ += std::to_string(body.size());
    out_ += keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
    out_ += body;
    finish(429);
    auto ec = co_await write_all(client_, out_, cfg_->server.idle_timeout);
    out_.clear();
    if (ec) co_return false;
    if (!keep_alive) co_await linger();
    co_return keep_alive;
}

awaitable<void> session::linger() {
    error_code ec;
    client_.shutdown(tcp::socket::shutdown_send, ec);
    track_.arm(linger_time);
    std::size_t discarded = 0;
    while (discarded < 4 * 1024 * 1024) {
        in_.clear();
        ec = co_await relay_.read_some(client_, in_);
        if (ec) break;
        discarded += in_.size();
    }
    in_.clear();
}

}  // namespace sluice::http
