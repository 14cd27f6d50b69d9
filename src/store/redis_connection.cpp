#include "store/redis_connection.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <openssl/err.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <tuple>

namespace sluice::store {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t read_chunk = std::size_t{16} * 1024;

void report(const std::exception_ptr& e) {
    if (!e) return;
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& ex) {
        spdlog::error("redis connection ended by an unexpected exception: {}", ex.what());
    }
}

std::vector<std::string> handshake_commands(const redis_connection_options& o) {
    std::vector<std::string> out;
    if (!o.password.empty()) {
        if (o.username.empty())
            out.push_back(format_command({"AUTH", o.password}));
        else
            out.push_back(format_command({"AUTH", o.username, o.password}));
    }
    if (o.database != 0) out.push_back(format_command({"SELECT", std::to_string(o.database)}));
    if (!o.script.empty()) out.push_back(format_command({"SCRIPT", "LOAD", o.script}));
    return out;
}

// Not formatted inside a coroutine: GCC 12 mishandles a braced list there.
const std::string& asking_command() {
    static const std::string command = format_command({"ASKING"});
    return command;
}

std::string reload_command(const redis_connection_options& o) {
    return o.script.empty() ? std::string() : format_command({"SCRIPT", "LOAD", o.script});
}

using tls_stream = asio::ssl::stream<tcp::socket&>;

// Outside the coroutine: GCC 12 mishandles a braced list of literals inside one.
std::string subscribe_command() { return format_command({"SUBSCRIBE", "+switch-master"}); }

// One read or one whole write, on the TLS stream when there is one, else on the socket.
awaitable<std::tuple<error_code, std::size_t>> read_some(tcp::socket& s, tls_stream* tls, asio::mutable_buffer b) {
    if (tls) co_return co_await tls->async_read_some(b, use_tuple);
    co_return co_await s.async_read_some(b, use_tuple);
}

awaitable<std::tuple<error_code, std::size_t>> write_all(tcp::socket& s, tls_stream* tls, asio::const_buffer b) {
    if (tls) co_return co_await asio::async_write(*tls, b, use_tuple);
    co_return co_await asio::async_write(s, b, use_tuple);
}

}  // namespace

std::shared_ptr<asio::ssl::context> make_tls_context(const config::redis_tls_config& c) {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    auto check = [](const error_code& ec, const char* key, const std::string& file) {
        if (ec)
            throw std::runtime_error("store.redis.tls." + std::string(key) + ": cannot load " + file + ": " +
                                     ec.message());
    };
    error_code ec;
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_compression, ec);
    ctx->set_verify_mode(asio::ssl::verify_peer, ec);
    ctx->load_verify_file(c.ca_file, ec);
    check(ec, "ca_file", c.ca_file);
    if (!c.cert_file.empty()) {
        ctx->use_certificate_chain_file(c.cert_file, ec);
        check(ec, "cert_file", c.cert_file);
        ctx->use_private_key_file(c.key_file, asio::ssl::context::pem, ec);  // also checks it matches
        check(ec, "key_file", c.key_file);
    }
    return ctx;
}

redis_connection_options redis_connection_options::from(const config::store_config& c, std::string script,
                                                        std::shared_ptr<asio::ssl::context> tls) {
    redis_connection_options o;
    if (!c.redis_nodes.empty()) {
        o.host = c.redis_nodes.front().host;
        o.port = c.redis_nodes.front().port;
    }
    if (c.redis_tls) {
        o.tls = tls ? std::move(tls) : make_tls_context(*c.redis_tls);
        o.tls_server_name = c.redis_tls->server_name;
    }
    if (c.redis_sentinel) {
        o.sentinel_master = c.redis_sentinel->master;
        o.sentinels = c.redis_sentinel->nodes;
    }
    o.username = c.redis_username;
    if (!c.redis_password_env.empty()) {
        if (const char* p = std::getenv(c.redis_password_env.c_str())) o.password = p;
    }
    o.database = c.redis_database;
    o.timeout = c.redis_timeout;
    o.script = std::move(script);
    return o;
}

redis_clock::duration redis_connection_options::stall_after() const {
    return std::max<redis_clock::duration>(3 * timeout, std::chrono::seconds(1));
}

const char* redis_connection::to_string(error e) {
    switch (e) {
        case error::none: return "ok";
        case error::not_ready: return "redis not connected";
        case error::overloaded: return "too many redis calls in flight";
        case error::timeout: return "redis timeout";
        case error::connection_lost: return "redis connection lost";
        case error::stopped: return "redis connection stopped";
    }
    return "redis error";
}

std::shared_ptr<redis_connection> redis_connection::create(asio::any_io_executor ex, redis_connection_options o,
                                                           std::shared_ptr<redis_counters> counters) {
    return std::shared_ptr<redis_connection>(new redis_connection(std::move(ex), std::move(o), std::move(counters)));
}

redis_connection::redis_connection(asio::any_io_executor ex, redis_connection_options o,
                                   std::shared_ptr<redis_counters> counters)
    : ex_(std::move(ex)),
      opts_(std::move(o)),
      counters_(std::move(counters)),
      pipeline_({opts_.max_in_flight, opts_.stall_after()}, handshake_commands(opts_), reload_command(opts_)),
      socket_(ex_),
      host_(opts_.host),
      port_(opts_.port),
      writer_wake_(ex_),
      deadline_(ex_),
      backoff_timer_(ex_),
      watch_socket_(ex_),
      watch_timer_(ex_),
      backoff_(opts_.backoff_first, opts_.backoff_max),
      rng_(std::random_device{}()) {}

redis_connection::~redis_connection() = default;

void redis_connection::start() {
    if (started_) return;
    started_ = true;
    asio::co_spawn(ex_, run(shared_from_this()), report);
    if (!opts_.sentinels.empty()) asio::co_spawn(ex_, watch_switches(shared_from_this()), report);
}

void redis_connection::stop() {
    if (stopped_) return;
    stopped_ = true;
    backoff_timer_.cancel();
    watch_timer_.cancel();
    error_code ignored;
    watch_socket_.close(ignored);
    if (connected_) {
        drop_connection();  // serve() then fails what is outstanding with error::stopped
    } else {
        socket_.close(ignored);  // cuts a connect in progress short
    }
}

awaitable<redis_connection::result> redis_connection::call_formatted(std::string command, bool resend_on_noscript,
                                                                     bool asking,
                                                                     std::optional<redis_clock::time_point> until) {
    if (stopped_) co_return result{error::stopped, nullptr};
    if (!connected_ || !pipeline_.ready()) co_return result{error::not_ready, nullptr};
    const auto now = redis_clock::now();
    const auto deadline = until.value_or(now + opts_.timeout);
    if (deadline <= now) co_return result{error::timeout, nullptr};
    // Its reply finds no waiter and is dropped; the pipeline keeps the two adjacent. Both or
    // neither: a lone ASKING would apply to the next command.
    if (asking) {
        if (pipeline_.outstanding() + 2 > opts_.max_in_flight) co_return result{error::overloaded, nullptr};
        (void)pipeline_.push(asking_command(), deadline, false);
    }
    auto pushed = pipeline_.push(std::move(command), deadline, resend_on_noscript);
    if (pushed.error == redis_pipeline::push_error::overloaded) co_return result{error::overloaded, nullptr};
    if (pushed.error != redis_pipeline::push_error::none) co_return result{error::not_ready, nullptr};
    wake_writer();
    arm_deadline(deadline);

    result out;
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
        [this, id = pushed.request, &out](auto handler) {
            waiters_.emplace(id, waiter{&out, std::move(handler)});
        },
        asio::use_awaitable);
    co_return out;
}

// --- completion --------------------------------------------------------------------------

void redis_connection::finish(redis_pipeline::id request, error failure, reply_ptr reply) {
    auto node = waiters_.extract(request);
    if (node.empty()) return;
    *node.mapped().out = result{failure, std::move(reply)};
    // Resumed from the event loop, never inside ours: the caller may call() again at once.
    asio::post(ex_, [wake = std::move(node.mapped().wake)]() mutable { std::move(wake)(); });
}

void redis_connection::fail_all(const std::vector<redis_pipeline::id>& ids, error failure) {
    for (auto id : ids) finish(id, failure);
}

void redis_connection::wake_writer() {
    if (!pipeline_.writing()) writer_wake_.cancel();
}

void redis_connection::arm_deadline(redis_clock::time_point t) {
    if (t >= deadline_armed_) return;
    deadline_armed_ = t;
    deadline_.cancel();  // deadline_loop() re-arms for the pipeline's earliest deadline
}

void redis_connection::drop_connection() {
    ready_.store(false, std::memory_order_release);
    if (!connected_) return;
    connected_ = false;
    if (!stopped_) counters_->connection_lost.add();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    writer_wake_.cancel();
    deadline_.cancel();
}

// --- the connection's life -------------------------------------------------------------

awaitable<void> redis_connection::run(std::shared_ptr<redis_connection> self) {
    std::uniform_real_distribution<double> jitter(0.0, 1.0);
    while (!stopped_) {
        bool up = co_await connect_socket();
        if (stopped_) break;
        if (up) {
            if (ever_connected_) counters_->reconnects.add();
            ever_connected_ = true;
            co_await serve();
            if (stopped_) break;
        }
        co_await wait_for(backoff_.next(jitter(rng_)));
    }
    // Nothing else holds `self` once this returns: the last reference may go with it.
    (void)self;
}

awaitable<void> redis_connection::wait_for(redis_clock::duration d) {
    backoff_timer_.expires_after(d);
    auto [ec] = co_await backoff_timer_.async_wait(use_tuple);
    (void)ec;  // cancelled by stop(): the caller checks stopped_
}

void redis_connection::note_failure(const std::string& what) {
    if (what == last_failure_) {
        spdlog::debug("redis: {}", what);
        return;
    }
    last_failure_ = what;
    spdlog::warn("redis: {}", what);
}

awaitable<error_code> redis_connection::open_stream(tcp::socket& s, std::unique_ptr<tls_stream>& tls,
                                                    const std::string& host, std::uint16_t port,
                                                    asio::steady_timer& timer) {
    using namespace asio::experimental::awaitable_operators;
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
    if (stopped_) co_return asio::error::operation_aborted;
    timer.expires_after(opts_.connect_timeout);  // the connect and the handshake, after the lookup

    tls.reset();  // it refers to `s`
    s = tcp::socket(ex_);
    auto connected = co_await (asio::async_connect(s, endpoints, use_tuple) || timer.async_wait(use_tuple));
    if (connected.index() != 0) co_return asio::error::timed_out;
    if (auto cec = std::get<0>(std::get<0>(connected)); cec) co_return cec;
    s.set_option(tcp::no_delay(true), ec);
    if (!opts_.tls) co_return error_code{};

    tls = std::make_unique<tls_stream>(s, *opts_.tls);
    const std::string& name = opts_.tls_server_name.empty() ? host : opts_.tls_server_name;
    tls->set_verify_callback(asio::ssl::host_name_verification(name), ec);
    if (ec) co_return ec;
    asio::ip::make_address(name, ec);
    if (ec && !SSL_set_tlsext_host_name(tls->native_handle(), name.c_str()))  // SNI takes names only
        co_return error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category());
    auto shaken =
        co_await (tls->async_handshake(asio::ssl::stream_base::client, use_tuple) || timer.async_wait(use_tuple));
    if (shaken.index() != 0) co_return asio::error::timed_out;
    co_return std::get<0>(std::get<0>(shaken));
}

awaitable<reply_ptr> redis_connection::ask_once(const config::host_port& to, std::vector<std::string> argv) {
    using namespace asio::experimental::awaitable_operators;
    tcp::socket s(ex_);
    std::unique_ptr<tls_stream> tls;
    asio::steady_timer timer(ex_, opts_.connect_timeout);
    auto close = [&] {
        tls.reset();
        error_code ignored;
        s.close(ignored);
    };
    auto fail = [&](const error_code& ec) {
        spdlog::debug("redis: asking {}:{} failed: {}", to.host, to.port, ec.message());
        close();
        return reply_ptr();
    };
    if (auto ec = co_await open_stream(s, tls, to.host, to.port, timer); ec) co_return fail(ec);
    const std::string command = format_command(argv);
    auto wrote = co_await (write_all(s, tls.get(), asio::buffer(command)) || timer.async_wait(use_tuple));
    if (wrote.index() != 0) co_return fail(asio::error::timed_out);
    if (auto ec = std::get<0>(std::get<0>(wrote)); ec) co_return fail(ec);
    reply_reader reader;
    std::string buf(4096, '\0');
    for (;;) {  // bounded by the timer
        auto got = co_await (read_some(s, tls.get(), asio::buffer(buf)) || timer.async_wait(use_tuple));
        if (got.index() != 0) co_return fail(asio::error::timed_out);
        auto [ec, n] = std::get<0>(got);
        if (ec) co_return fail(ec);
        if (!reader.feed(std::string_view(buf.data(), n))) co_return fail(asio::error::invalid_argument);
        reply_ptr reply;
        auto st = reader.next(reply);
        if (st == reply_reader::status::error) co_return fail(asio::error::invalid_argument);
        if (st == reply_reader::status::reply) {
            close();
            co_return reply;
        }
    }
}

awaitable<bool> redis_connection::find_primary() {
    for (const auto& sentinel : opts_.sentinels) {
        if (stopped_) co_return false;
        // Built outside the co_await: GCC 12 miscompiles an initializer list in its operand.
        std::vector<std::string> argv{"SENTINEL", "get-master-addr-by-name", opts_.sentinel_master};
        auto r = co_await ask_once(sentinel, std::move(argv));
        if (!r) continue;
        unsigned port = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING) {
            std::string host(r->element[0]->str, r->element[0]->len);
            const char* p = r->element[1]->str;
            auto [end, pec] = std::from_chars(p, p + r->element[1]->len, port);
            if (pec == std::errc() && end == p + r->element[1]->len && port > 0 && port < 65536) {
                if (host != host_ || port != port_)
                    spdlog::info("redis: sentinel {}:{} names {}:{} as the primary of {}", sentinel.host, sentinel.port,
                                 host, port, opts_.sentinel_master);
                host_ = std::move(host);
                port_ = static_cast<std::uint16_t>(port);
                co_return true;
            }
        }
        note_failure("sentinel " + sentinel.host + ":" + std::to_string(sentinel.port) + " names no primary for " +
                     opts_.sentinel_master);
    }
    if (!stopped_) note_failure("no sentinel answered with the primary of " + opts_.sentinel_master);
    co_return false;
}

awaitable<void> redis_connection::watch_switches(std::shared_ptr<redis_connection> self) {
    for (std::size_t next = 0; !stopped_; ++next) {
        const auto& sentinel = opts_.sentinels[next % opts_.sentinels.size()];
        asio::steady_timer timer(ex_, opts_.connect_timeout);
        auto ec = co_await open_stream(watch_socket_, watch_tls_, sentinel.host, sentinel.port, timer);
        if (!ec && !stopped_) {
            const std::string subscribe = subscribe_command();
            auto [wec, n] = co_await write_all(watch_socket_, watch_tls_.get(), asio::buffer(subscribe));
            (void)n;
            if (!wec && !stopped_) co_await read_switches();
        }
        watch_tls_.reset();
        error_code ignored;
        watch_socket_.close(ignored);
        if (stopped_) break;
        watch_timer_.expires_after(opts_.backoff_max);
        auto [tec] = co_await watch_timer_.async_wait(use_tuple);
        (void)tec;  // cancelled by stop()
    }
    (void)self;
}

awaitable<void> redis_connection::read_switches() {
    reply_reader reader;
    std::string buf(4096, '\0');
    while (!stopped_) {
        auto [ec, n] = co_await read_some(watch_socket_, watch_tls_.get(), asio::buffer(buf));
        if (ec || stopped_ || !reader.feed(std::string_view(buf.data(), n))) co_return;
        for (;;) {
            reply_ptr r;
            auto st = reader.next(r);
            if (st == reply_reader::status::need_more) break;
            if (st == reply_reader::status::error) co_return;
            // ["message", "+switch-master", "<master> <old ip> <old port> <new ip> <new port>"]
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_STRING &&
                std::string_view(r->element[0]->str, r->element[0]->len) == "message" &&
                r->element[2]->type == REDIS_REPLY_STRING)
                on_switch(std::string_view(r->element[2]->str, r->element[2]->len));
        }
    }
}

void redis_connection::on_switch(std::string_view message) {
    std::vector<std::string_view> words;
    for (std::size_t at = 0; at <= message.size();) {
        auto end = std::min(message.find(' ', at), message.size());
        words.push_back(message.substr(at, end - at));
        at = end + 1;
    }
    if (words.size() != 5 || words[0] != opts_.sentinel_master) return;
    unsigned port = 0;
    auto [end, pec] = std::from_chars(words[4].data(), words[4].data() + words[4].size(), port);
    if (pec != std::errc() || end != words[4].data() + words[4].size() || port == 0 || port > 65535) return;
    spdlog::info("redis: sentinels switched the primary of {} to {}:{}", opts_.sentinel_master, words[3], words[4]);
    // The next connect goes there, not to whatever the first sentinel asked believes now.
    switched_to_ = config::host_port{std::string(words[3]), static_cast<std::uint16_t>(port)};
    if (connected_ && (switched_to_->host != host_ || switched_to_->port != port_)) drop_connection();
}

awaitable<bool> redis_connection::connect_socket() {
    if (switched_to_) {
        spdlog::info("redis: +switch-master names {}:{} as the primary of {}", switched_to_->host, switched_to_->port,
                     opts_.sentinel_master);
        host_ = switched_to_->host;
        port_ = switched_to_->port;
        switched_to_.reset();
    } else if (!opts_.sentinels.empty()) {
        const bool found = co_await find_primary();  // (not in a `&&`: GCC 12 and co_await)
        if (!found) co_return false;
    }
    if (stopped_) co_return false;
    asio::steady_timer timer(ex_, opts_.connect_timeout);
    auto ec = co_await open_stream(socket_, tls_, host_, port_, timer);
    if (!ec && switched_to_ && (switched_to_->host != host_ || switched_to_->port != port_))
        ec = asio::error::operation_aborted;  // a switch came during the connect: go there instead
    if (ec || stopped_) {
        tls_.reset();
        error_code ignored;
        socket_.close(ignored);
        const bool handshake = opts_.tls && ec.category() == asio::error::get_ssl_category();
        if (handshake)  // a certificate refused: say so, not once a second
            note_failure("TLS with " + host_ + ":" + std::to_string(port_) + " failed: " + ec.message());
        else
            spdlog::debug("redis: connecting to {}:{} failed: {}", host_, port_, ec.message());
        co_return false;
    }
    last_failure_.clear();
    connected_ = true;
    reader_.reset();
    deadline_armed_ = redis_clock::time_point::max();
    pipeline_.on_connected(redis_clock::now(), opts_.connect_timeout);
    if (pipeline_.ready()) {
        ready_.store(true, std::memory_order_release);
        backoff_.reset();
    }
    co_return true;
}

awaitable<void> redis_connection::serve() {
    using namespace asio::experimental::awaitable_operators;
    // Each loop ends when the connection is dropped (by itself or another); all three
    // have finished before anything is failed or a new connection made.
    try {
        co_await (read_loop() && write_loop() && deadline_loop());
    } catch (const std::exception& e) {
        // Only allocation failure gets here; the other loops were cancelled and have ended.
        spdlog::error("redis: connection to {}:{} failed: {}", host_, port_, e.what());
        drop_connection();
    }
    auto failed = pipeline_.on_disconnect();
    fail_all(failed, stopped_ ? error::stopped : error::connection_lost);
    error_code ignored;
    socket_.close(ignored);
    tls_.reset();
}

awaitable<void> redis_connection::read_loop() {
    std::string buf(read_chunk, '\0');
    while (connected_) {
        auto [ec, n] = co_await read_some(socket_, tls_.get(), asio::buffer(buf));
        if (!connected_) co_return;
        if (ec) {
            spdlog::info("redis: connection to {}:{} lost: {}", host_, port_, ec.message());
            drop_connection();
            co_return;
        }
        if (!reader_.feed(std::string_view(buf.data(), n))) {
            spdlog::warn("redis: protocol error: {}", reader_.error_text());
            drop_connection();
            co_return;
        }
        for (;;) {
            reply_ptr reply;
            auto st = reader_.next(reply);
            if (st == reply_reader::status::need_more) break;
            if (st == reply_reader::status::error) {
                spdlog::warn("redis: protocol error: {}", reader_.error_text());
                drop_connection();
                co_return;
            }
            if (!on_reply(std::move(reply))) {
                drop_connection();
                co_return;
            }
        }
    }
}

bool redis_connection::on_reply(reply_ptr r) {
    auto ev = pipeline_.on_reply(std::move(r));
    using kind = redis_pipeline::reply_event::kind;
    switch (ev.what) {
        case kind::resolved: {
            const bool demoted = is_readonly_reply(ev.reply.get());
            finish(ev.request, error::none, std::move(ev.reply));
            if (demoted) {
                spdlog::warn("redis: {}:{} answered READONLY (it is a replica now), reconnecting", host_, port_);
                return false;
            }
            break;
        }
        case kind::discarded: break;
        case kind::resent:
            if (ev.reload_queued) {
                counters_->noscript_reloads.add();
                spdlog::info("redis: script missing (NOSCRIPT), loading it again");
            }
            wake_writer();
            break;
        case kind::handshake:
            if (ev.became_ready) {
                ready_.store(true, std::memory_order_release);
                backoff_.reset();
                spdlog::info("redis: connected to {}:{}", host_, port_);
            }
            break;
        case kind::failed: spdlog::warn("redis: {} (reconnecting)", ev.error); return false;
    }
    return true;
}

awaitable<void> redis_connection::write_loop() {
    while (connected_) {
        auto batch = pipeline_.take_batch(redis_clock::now());
        if (batch.commands == 0) {
            // Idle: wait to be woken by call() (cancel) or by drop_connection().
            writer_wake_.expires_at(redis_clock::time_point::max());
            auto [ec] = co_await writer_wake_.async_wait(use_tuple);
            (void)ec;
            continue;
        }
        counters_->writes.add();
        counters_->commands.add(batch.commands);
        auto [ec, n] = co_await write_all(socket_, tls_.get(), asio::buffer(batch.bytes));
        (void)n;
        if (!connected_) co_return;
        if (ec) {
            spdlog::info("redis: write to {}:{} failed: {}", host_, port_, ec.message());
            drop_connection();
            co_return;
        }
        pipeline_.write_done();
    }
}

awaitable<void> redis_connection::deadline_loop() {
    while (connected_) {
        deadline_armed_ = pipeline_.next_deadline().value_or(redis_clock::time_point::max());
        deadline_.expires_at(deadline_armed_);
        auto [ec] = co_await deadline_.async_wait(use_tuple);
        (void)ec;  // fired, re-armed earlier by arm_deadline(), or dropped: look again
        if (!connected_) co_return;
        expired_.clear();
        bool rebuild = pipeline_.expire(redis_clock::now(), expired_);
        counters_->timeouts.add(expired_.size());
        fail_all(expired_, error::timeout);
        if (rebuild) {
            spdlog::warn("redis: {}:{} stopped answering (oldest call older than {} ms), reconnecting", host_, port_,
                         std::chrono::duration_cast<std::chrono::milliseconds>(opts_.stall_after()).count());
            drop_connection();
            co_return;
        }
    }
}

}  // namespace sluice::store
