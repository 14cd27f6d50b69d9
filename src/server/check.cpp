// The HTTP check of a session on service.http_listen: another proxy (nginx's auth_request,
// Traefik's forwardAuth) describes a request by fields of its own; the request so described
// goes through the route, identify and limit phases as a proxied one would, and the answer
// is 200 (admitted) or 429 with the same rate-limit fields, or the 400, 401 or 403 the
// gateway would give. Nothing is sent upstream. A concurrency slot the check takes is held
// until its answer is written, as any request's (serve_one releases it).
#include "server/session.hpp"

#include "base/text.hpp"
#include "http/async.hpp"
#include "identity/identify.hpp"

#include <boost/beast/http/error.hpp>

#include <chrono>

namespace sluice::server {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using asio::awaitable;
using http::clock;
namespace fail = http::fail;

namespace {

// The one value of the field `name` in `out` ("" when absent); false when given twice.
bool single(const http::message_head& h, std::string_view name, std::string_view& out) {
    bool seen = false;
    for (const auto& f : h.fields()) {
        if (!base::iequals(h.name(f), name)) continue;
        if (seen) return false;
        seen = true;
        out = h.value(f);
    }
    return true;
}

// The value of a field that has two names (nginx's X-Original-*, Traefik's X-Forwarded-*; ""
// when neither is given); false when either is given twice, or both with different values:
// a proxy sets one and passes the client's other on, so a client must not choose by sending
// the name its proxy does not set.
bool either(const http::message_head& h, std::string_view first, std::string_view second, std::string_view& out) {
    std::string_view a, b;
    if (!single(h, first, a) || !single(h, second, b)) return false;
    a = base::trim(a);
    b = base::trim(b);
    if (!a.empty() && !b.empty() && a != b) return false;
    out = a.empty() ? b : a;
    return true;
}

}  // namespace

awaitable<after> session::check() {
    if (!snap_->check_peers.contains(peer_)) co_return co_await respond(fail::check_peer);
    if (req_.target.path != "/check") co_return co_await respond(fail::check_path);
    if (head_.method != bhttp::verb::get && head_.method != bhttp::verb::post)
        co_return co_await respond(fail::check_method, "Allow: GET, POST\r\n");
    const auto body_failed = co_await discard_body();
    if (body_failed) co_return co_await respond(*body_failed);
    if (auto f = describe_original()) co_return co_await respond(*f);

    req_.route = snap_->router.match(orig_.method_text(), orig_.find(bhttp::field::host), req_.target);
    const bool limited = req_.route && req_.route->limits;
    const auto now =
        limited ? std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                      .count()
                : 0;
    auto r = identity::identify_as(snap_->clients, orig_, check_client_, limited, now);
    req_.who = std::move(r.who);
    if (r.refused) {
        req_.refusal = std::move(r.reason);
        req_.outcome.decision = limit::decision_kind::unauthorized;
        w_.metrics.unauthorized();
        co_return co_await respond(fail::unauthorized.with(req_.refusal));
    }
    co_await limits_.decide(snap_, req_.route, req_.who, req_.outcome, metrics::listener::check);
    if (req_.outcome.what != limit::outcome::kind::pass) co_return co_await respond_refused();
    co_return co_await respond_admitted();
}

// A body sent with the check (a POST) is read and dropped, within server.max_body_bytes
// (the parser's limit) and server.body_timeout.
awaitable<std::optional<http::failure>> session::discard_body() {
    auto& p = *parser_;
    if (p.is_done()) co_return std::nullopt;
    req_.body_deadline = {clock::now() + cfg_->server.body_timeout, cfg_->server.body_min_rate};
    if (p.expect_continue() && head_.version >= 11) {
        const auto ec = co_await relay_.write_all(client_, "HTTP/1.1 100 Continue\r\n\r\n", cfg_->server.idle_timeout);
        if (ec) co_return fail::client_gone;
    }
    while (!p.is_done()) {
        req_.body.clear();
        auto r = co_await relay_.fill(p, client_, in_, req_.body_deadline, req_.body, proxy::piece_size);
        if (r.failed == proxy::pump_result::parse)
            co_return r.ec == bhttp::error::body_limit ? fail::too_large : fail::bad_body;
        if (r.failed == proxy::pump_result::read)
            co_return proxy::relay::is_timeout(r.ec) ? fail::body_timeout : fail::client_gone;
    }
    req_.body.clear();
    co_return std::nullopt;
}

// The original request: its method (X-Original-Method, else X-Forwarded-Method, else GET),
// target (X-Original-URI, else X-Forwarded-Uri), host (X-Forwarded-Host, else the check's
// Host) and the check's other fields (credentials, header: kinds); the client from
// X-Forwarded-For walked through clients.trusted_proxies, else X-Real-IP. A field that
// describes it given twice is refused: which one the proxy meant cannot be told.
std::optional<http::failure> session::describe_original() {
    std::string_view method, uri, host, real_ip;
    if (!either(head_, "x-original-method", "x-forwarded-method", method) ||
        !either(head_, "x-original-uri", "x-forwarded-uri", uri) || !single(head_, "x-forwarded-host", host) ||
        !single(head_, "x-real-ip", real_ip))
        return fail::check_twice;
    if (method.empty()) method = "GET";
    const auto verb = bhttp::string_to_verb(method);
    if (!base::is_token(method) || (verb == bhttp::verb::unknown && is_verb_in_other_case(method)))
        return fail::check_bad_method;
    if (uri.empty()) return fail::check_no_uri;
    std::vector<std::string_view> forwarded;
    for (const auto& f : head_.fields())
        if (base::iequals(head_.name(f), "x-forwarded-for")) forwarded.push_back(head_.value(f));
    const auto client = identity::forwarded_client(forwarded, real_ip, snap_->clients.trusted);
    if (!client) return fail::check_no_client;
    check_client_ = *client;

    orig_.set_request_line(verb, method, uri, head_.version);
    host = base::trim(host);
    orig_.add(bhttp::field::host, "Host", host.empty() ? head_.find(bhttp::field::host) : host);
    for (const auto& f : head_.fields())
        if (f.name != bhttp::field::host) orig_.add(f.name, head_.name(f), head_.value(f));
    if (const char* why = route::parse_target(orig_.method_text(), orig_.target(), req_.target))
        return fail::bad_target.with(why);
    if (req_.target.form == route::target_form::authority) return fail::connect_refused;
    return std::nullopt;
}

// 200: admitted (or nothing limits the request), with the rate-limit fields the gateway would
// add to the upstream's answer.
awaitable<after> session::respond_admitted() {
    const bool keep = may_keep_alive();
    req_.status = 200;
    out_.clear();
    http::write_admitted(out_, req_.outcome.fields, connection_of(keep));
    co_return co_await send_own_answer(keep);
}

}  // namespace sluice::server
