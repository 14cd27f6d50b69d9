#include "server/session.hpp"

#include "base/units.hpp"
#include "http/async.hpp"
#include "identity/identify.hpp"
#include "server/proxy_header.hpp"

#include <boost/asio/co_spawn.hpp>

#include <boost/beast/http/error.hpp>

namespace sluice::server {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;
using http::clock;
namespace fail = http::fail;

namespace {

constexpr auto linger_time = std::chrono::seconds(2);
constexpr std::size_t linger_bytes = 4 * base::MiB;
// Buffers a connection keeps between requests (the read buffer excepted): enough for
// typical answers, so that the common request allocates nothing. A request that needed more
// gives it back when it ends.
constexpr std::size_t kept_bytes = 16 * base::KiB;
// A request's first read: most heads fit; a longer one is read on 16 KiB at a time.
constexpr std::size_t first_read_bytes = 1024;

identity::address peer_address(const tcp::socket& s) {
    error_code ec;
    auto ep = s.remote_endpoint(ec);
    return ec ? identity::address{} : identity::normalize(ep.address());
}

// The failure a request head's parse error stands for.
http::failure head_error(const http::request_parser& p, const error_code& ec) {
    if (ec == bhttp::error::body_limit) return fail::too_large;  // a declared length over the limit
    if (ec == bhttp::error::header_limit) return fail::header_too_large;
    if (p.framing() == http::framing_error::transfer_encoding_in_http10) return fail::bad_framing_http10;
    if (p.framing() != http::framing_error::none) return fail::bad_framing;
    if (ec == bhttp::error::multiple_content_length || ec == bhttp::error::bad_content_length) return fail::bad_length;
    if (ec == bhttp::error::bad_transfer_encoding) return fail::bad_coding;
    return fail::bad_request;
}

// Answers a client may get on a connection that then stays open: the request was read
// whole and understood; only its outcome was refused or failed.
// (401, 403, a 400 for the identifier values the policy needs, and 5xx.)
bool keeps_connection(const http::failure& f) {
    return f.status == 401 || f.status == 403 || f.status >= 500 || f.code == fail::missing_identifier.code ||
           f.code == fail::ambiguous_identifier.code;
}

}  // namespace

bool is_verb_in_other_case(std::string_view method) {
    std::string upper(method);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return bhttp::string_to_verb(upper) != bhttp::verb::unknown;
}

void request_state::reset(std::size_t unmatched_slot) {
    target.clear();
    route = nullptr;
    route_slot = unmatched_slot;
    who = {};
    refusal.clear();
    outcome.reset();
    started = clock::now();
    upstream_us = -1;
    upstream = nullptr;
    upstream_addr.clear();
    attempts = 0;
    status = 0;
    open = false;
    early_answer = false;
    reported_cost.reset();
    body.clear();
}

namespace {

awaitable<void> serve_requests(std::unique_ptr<connection> c, bool fresh);

// The session lives in this coroutine's frame, gone when it returns. True: idle.
awaitable<bool> run_session(connection& c, bool fresh) {
    session s(c);
    bool opened = true;  // no co_await inside && or ||: GCC 12 miscompiles some
    if (fresh) opened = co_await s.open();
    if (!opened) co_return false;
    co_return co_await s.run();
}

// Waits for the client's next request holding the connection alone; the idle timeout, a
// drain or the client's leaving ends it.
void wait_idle(std::unique_ptr<connection> c) {
    connection& conn = *c;
    conn.track.idle = true;
    conn.track.arm(conn.w.snap->cfg->server.idle_timeout);
    conn.client.socket().async_wait(tcp::socket::wait_read, [c = std::move(c)](error_code ec) mutable {
        if (ec) return c->close();
        worker& w = c->w;
        asio::co_spawn(w.ioc, serve_requests(std::move(c), false), base::log_exception("connection"));
    });
}

awaitable<void> serve_requests(std::unique_ptr<connection> c, bool fresh) {
    const bool idle = co_await run_session(*c, fresh);
    if (idle)
        wait_idle(std::move(c));
    else
        c->close();
}

}  // namespace

awaitable<void> serve(worker& w, tcp::socket socket, listener_kind kind) {
    co_await serve_requests(std::make_unique<connection>(w, std::move(socket), kind), true);
}

connection::connection(worker& owner, tcp::socket s, listener_kind kind)
    : w(owner),
      client(std::move(s)),
      peer(peer_address(client.socket())),
      client_ip(peer.to_string()),
      track(w.connections, client.socket()),
      tls(kind == listener_kind::tls),
      check(kind == listener_kind::check) {
    w.metrics.connection_opened();
    w.open_connections.fetch_add(1, std::memory_order_relaxed);
    error_code ec;
    client.socket().set_option(tcp::no_delay(true), ec);
    client.socket().non_blocking(true, ec);  // request_waiting()'s direct read
}

connection::~connection() {
    w.open_connections.fetch_sub(1, std::memory_order_relaxed);
    w.metrics.connection_closed();
}

void connection::close() {
    if (client.secure()) client.shutdown_send();
    error_code ec;
    client.socket().close(ec);
}

session::session(connection& c)
    : c_(c),
      w_(c.w),
      snap_(w_.snap),
      cfg_(snap_->cfg.get()),
      client_(c.client),
      peer_(c.peer),
      client_ip_(c.client_ip),
      track_(c.track) {
    track_.on_sweep = [this] { check_client_left(); };
}

// Also reached when an exception leaves the coroutine: the log stays right.
session::~session() {
    if (req_.open) end_request();
    release_upstream(false);
    track_.on_sweep = nullptr;
}

awaitable<bool> session::open() {
    if (c_.check) co_return true;  // a proxy's check connection: no PROXY header, no TLS
    auto client = co_await read_proxy_header(w_, client_.socket(), track_, peer_);
    if (!client) co_return false;
    peer_ = *client;
    client_ip_ = peer_.to_string();
    if (!c_.tls) co_return true;
    co_return co_await handshake();
}

awaitable<bool> session::run() {
    for (;;) {
        const bool keep = co_await serve_one();
        if (!keep) co_return false;
        c_.first = false;
        if (!request_waiting()) co_return true;
    }
}

// The TLS handshake, within server.tls.handshake_timeout (else server.header_timeout) from
// accept; from its first byte it counts against server.tls.max_handshakes of the worker:
// beyond, a connection is closed at once (a flood of handshakes costs CPU, never more
// memory). False: closed.
awaitable<bool> session::handshake() {
    using metrics::tls_result;
    using metrics::tls_version;
    const auto& t = *cfg_->server.tls;
    track_.arm(t.handshake_timeout.count() > 0 ? t.handshake_timeout : cfg_->server.header_timeout);
    // A connection that has said nothing costs no SSL and holds no handshake slot: idle
    // connections cannot crowd out the handshakes of clients that speak.
    auto [waited] = co_await client_.socket().async_wait(tcp::socket::wait_read, http::use_tuple);
    if (waited) {
        const bool timeout = proxy::relay::is_timeout(relay_.timed(waited));
        w_.metrics.tls_handshake(timeout ? tls_result::timeout : tls_result::failed, tls_version::none);
        co_return false;
    }
    if (!snap_->tls || w_.handshakes >= t.max_handshakes) {
        w_.metrics.tls_handshake(tls_result::refused, tls_version::none);
        co_return false;
    }
    auto ssl = snap_->tls->new_session();
    if (!ssl) {
        w_.metrics.tls_handshake(tls_result::failed, tls_version::none);
        co_return false;
    }
    client_.start_tls(std::move(ssl));
    ++w_.handshakes;
    auto [ec, n] = co_await client_.async_handshake(http::use_tuple);
    --w_.handshakes;
    if (ec) {
        const bool timeout = proxy::relay::is_timeout(relay_.timed(ec));
        w_.metrics.tls_handshake(timeout ? tls_result::timeout : tls_result::failed, tls_version::none);
        co_return false;
    }
    SSL* s = client_.ssl();
    w_.metrics.tls_handshake(tls_result::ok,
                             SSL_version(s) == TLS1_3_VERSION ? tls_version::tls1_3 : tls_version::tls1_2);
    c_.certificate = tls::client_name(s, cfg_->clients.user_certificate);
    co_return true;
}

// Between two requests, as nginx does: a direct read (a busy client's next request is often
// there already, and asio's own read would try the same read). Nothing there: the session
// ends and the connection waits idle (serve_requests). True: bytes, or the client's end or
// an error, which read_head will hear.
bool session::request_waiting() {
    if (in_.size() > 0) return true;  // pipelined
    if (in_.capacity() > first_read_bytes) in_.shrink_to_fit();
    error_code ec;
    const auto n = client_.read_some_now(in_.prepare(first_read_bytes), ec);
    in_.commit(n);
    return n > 0 || (ec && ec != asio::error::would_block);
}

awaitable<bool> session::serve_one() {
    const after next = co_await phases();
    limits_.release();  // the answer is complete (or failed): its slots are free
    cap_.release();
    end_request();
    if (next == after::linger) co_await linger();
    if (out_.capacity() > kept_bytes) std::string().swap(out_);
    if (req_.body.capacity() > kept_bytes) std::string().swap(req_.body);
    co_return next == after::keep_alive && !w_.draining;
}

awaitable<after> session::phases() {
    switch (co_await read_head()) {
        case head_status::closed:
            req_.open = false;  // nothing to log: the client left before a whole head
            co_return after::close;
        case head_status::failed: co_return co_await respond(head_failure_);
        case head_status::ok: break;
    }
    if (auto f = check_head()) co_return co_await respond(*f);
    if (c_.check) co_return co_await check();
    req_.route = snap_->router.match(head_.method_text(), head_.find(bhttp::field::host), req_.target);
    if (req_.route) req_.route_slot = req_.route->metric_slot;
    if (!identify()) {
        w_.metrics.unauthorized();
        co_return co_await respond(fail::unauthorized.with(req_.refusal));
    }
    co_await limits_.decide(snap_, req_.route, req_.who, req_.outcome);
    if (req_.outcome.what != limit::outcome::kind::pass) co_return co_await respond_refused();
    co_return co_await exchange();
}

// One deadline covers the whole head (a slowloris client cannot stretch it by trickling
// bytes); before the first byte of a later request the idle timeout runs instead.
awaitable<session::head_status> session::read_head() {
    if (snap_ != w_.snap) {
        snap_ = w_.snap;
        cfg_ = snap_->cfg.get();
    }
    req_.reset(snap_->unmatched_slot);
    limits_.clear_charge();
    if (c_.check) {
        orig_.clear();
        req_.route_slot = snap_->check_slot;  // checks are counted apart from proxied requests
    }
    auto& p = parser_.emplace(head_, req_sink_);
    req_sink_ = http::body_sink{&req_.body, http::body_sink::framing::identity, 0};
    resp_sink_.bytes = 0;
    p.eager(false);
    p.header_limit(static_cast<std::uint32_t>(cfg_->server.max_header_bytes));
    p.body_limit(boost::none);
    p.limit_body(cfg_->server.max_body_bytes);

    bool got_some = in_.size() > 0;
    bool header_armed = got_some || c_.first;
    track_.idle = !got_some;
    track_.arm(header_armed ? cfg_->server.header_timeout : cfg_->server.idle_timeout);
    for (;;) {
        if (in_.size() > 0) {
            req_.open = true;
            error_code ec;
            in_.consume(p.put(in_.data(), ec));
            if (!ec && p.is_header_done()) co_return head_status::ok;
            if (ec && ec != bhttp::error::need_more) {
                head_failure_ = head_error(p, ec);
                co_return head_status::failed;
            }
        }
        auto [ec, n] =
            co_await client_.async_read_some(in_.prepare(got_some ? kept_bytes : first_read_bytes), http::use_tuple);
        in_.commit(n);
        if (ec) {
            if (!got_some || !proxy::relay::is_timeout(relay_.timed(ec))) co_return head_status::closed;
            head_failure_ = fail::header_timeout;
            co_return head_status::failed;
        }
        if (!got_some && n > 0) {
            got_some = true;
            track_.idle = false;
            req_.started = clock::now();
            if (!header_armed) track_.arm(cfg_->server.header_timeout);
            header_armed = true;
        }
    }
}

// The identify phase: who is calling. Credentials are read only when the route is limited
// (and never an allow-listed client's); false when they were refused (the answer is 401).
bool session::identify() {
    const bool limited = req_.route && req_.route->limits;
    const auto now =
        limited ? std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                      .count()
                : 0;
    auto r = identity::identify(snap_->clients, head_, peer_, limited, now, c_.certificate);
    req_.who = std::move(r.who);
    if (!r.refused) return true;
    req_.refusal = std::move(r.reason);
    req_.outcome.decision = limit::decision_kind::unauthorized;
    return false;
}

std::optional<http::failure> session::check_head() {
    auto& p = *parser_;
    if (const char* why = route::parse_target(head_.method_text(), head_.target(), req_.target))
        return fail::bad_target.with(why);
    if (req_.target.form == route::target_form::authority) return fail::connect_refused;
    // HTTP/1.1 needs one Host; no version may send two (the router and the upstream could
    // each read another).
    if (const auto hosts = head_.count(bhttp::field::host); hosts > 1 || (head_.version >= 11 && hosts != 1))
        return fail::bad_host;
    if (head_.method == bhttp::verb::unknown && is_verb_in_other_case(head_.method_text())) return fail::bad_method;
    if (p.has_expect() && !p.expect_continue()) return fail::bad_expect;
    if (auto length = p.content_length(); length && *length > cfg_->server.max_body_bytes) return fail::too_large;
    return std::nullopt;
}

bool session::may_keep_alive() const {
    return parser_ && parser_->is_done() && parser_->keep_alive() && !w_.draining && !req_.early_answer;
}

http::connection session::connection_of(bool keep) const {
    if (!keep) return http::connection::close;
    return head_.version < 11 ? http::connection::keep_alive_http10 : http::connection::keep_alive;
}

// Sends Sluice's own answer. Unless the connection may stay open, it is then closed
// gracefully: the client gets the answer even while still sending a body we won't read.
awaitable<after> session::respond(const failure& f, std::string_view extra) {
    req_.status = f.status;
    if (f.status == fail::client_gone.status) {
        // No one to tell. The outcome is unknown (the upstream may have done the work):
        // unless an answer settled it already, the reservation stands.
        if (!limits_.settled()) co_await limits_.settle(limits_.charged());
        co_return after::close;
    }
    co_await settle(f.status);
    const bool keep = keeps_connection(f) && may_keep_alive();
    out_.clear();
    http::write_failure(out_, f, connection_of(keep), extra);
    co_return co_await send_own_answer(keep);
}

awaitable<after> session::respond_limited() {
    const bool keep = may_keep_alive();
    req_.status = 429;
    out_.clear();
    http::write_limited(out_, req_.route->limits->name, req_.outcome.retry_after_s, req_.outcome.fields,
                        connection_of(keep));
    co_return co_await send_own_answer(keep);
}

// The answer to a request the limit step did not pass, on the proxy and the check alike.
awaitable<after> session::respond_refused() {
    switch (req_.outcome.what) {
        case limit::outcome::kind::limited: co_return co_await respond_limited();
        case limit::outcome::kind::forbidden:
            w_.metrics.forbidden();
            co_return co_await respond(fail::forbidden.with(req_.outcome.reason));
        case limit::outcome::kind::missing:
            co_return co_await respond(fail::missing_identifier.with(req_.outcome.reason));
        case limit::outcome::kind::ambiguous:
            co_return co_await respond(fail::ambiguous_identifier.with(req_.outcome.reason));
        case limit::outcome::kind::blocked: co_return co_await respond_blocked();
        case limit::outcome::kind::store_down:
        case limit::outcome::kind::pass: break;  // never asked for a pass
    }
    co_return co_await respond(fail::store_down);
}

awaitable<after> session::respond_blocked() {
    const bool keep = may_keep_alive();
    req_.status = 429;
    out_.clear();
    http::write_blocked(out_, req_.route->limits->name, req_.outcome.retry_after_s, connection_of(keep));
    co_return co_await send_own_answer(keep);
}

awaitable<void> session::settle(unsigned status) {
    if (!limits_.settling()) co_return;
    const route::route& r = *req_.route;
    const bool charged = !r.charge || r.charge->charged(status);
    const std::int64_t cost = charged ? req_.reported_cost.value_or(r.cost) : 0;
    co_await limits_.settle(cost);
}

// Every answer Sluice gives itself has one write deadline, server.header_timeout: a few
// hundred bytes a client does not take in that long (a flood that never reads its 429s) are
// not waited for.
awaitable<after> session::send_own_answer(bool keep) {
    auto ec = co_await relay_.write_all(client_, out_, cfg_->server.header_timeout);
    if (ec) co_return after::close;
    co_return keep ? after::keep_alive : after::linger;
}

awaitable<void> session::linger() {
    client_.shutdown_send();
    track_.arm(linger_time);
    for (std::size_t discarded = 0; discarded < linger_bytes; discarded += in_.size()) {
        in_.clear();
        if (co_await relay_.read_some(client_, in_)) break;
    }
    in_.clear();
}

// The request's one log line and its metrics.
void session::end_request() {
    if (!req_.open) return;
    req_.open = false;
    const auto seconds = std::chrono::duration<double>(clock::now() - req_.started).count();
    w_.metrics.request_done(req_.route_slot, req_.status, seconds);
    if (!w_.access) return;
    const auto& o = req_.outcome;
    access_record r;
    r.peer = client_ip_;
    const bool described = c_.check && !orig_.method_text().empty();  // a check that named its request
    const auto& h = described ? orig_ : head_;
    r.method = h.method_text();
    r.path = req_.target.path.empty() ? h.target().substr(0, h.target().find('?')) : std::string_view(req_.target.path);
    std::string client;
    if (c_.check) {
        r.check = true;
        if (described) client = check_client_.to_string();
        r.client = client;
    }
    r.route = req_.route ? std::string_view(req_.route->name) : std::string_view("unmatched");
    r.policy = req_.route && req_.route->limits ? std::string_view(req_.route->limits->name) : std::string_view();
    r.decision = to_string(o.decision);
    r.id_kind = o.id_kind ? to_string(*o.id_kind) : "";
    if (o.id_kind) r.id = identity::hasher::to_hex(o.id);
    r.status = req_.status;
    r.bytes_in = req_sink_.bytes;
    r.bytes_out = resp_sink_.bytes;
    r.upstream_us = req_.upstream_us;
    r.cost = limits_.charged();
    if (req_.attempts > 0) {
        r.upstream = req_.upstream->name();
        r.upstream_addr = req_.upstream_addr;
        r.attempts = req_.attempts;
    }
    r.total_us = static_cast<std::int64_t>(seconds * 1e6);
    if (client_.secure()) {
        r.tls_version = tls::version_of(client_.ssl());
        r.sni = tls::sni_of(client_.ssl());
    }
    w_.access->write(r);
}

}  // namespace sluice::server
