#include "store/redis_connection.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cstdlib>

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

std::string reload_command(const redis_connection_options& o) {
    return o.script.empty() ? std::string() : format_command({"SCRIPT", "LOAD", o.script});
}

}  // namespace

redis_connection_options redis_connection_options::from(const config::store_config& c, std::string script) {
    redis_connection_options o;
    if (!c.redis_nodes.empty()) {
        o.host = c.redis_nodes.front().host;
        o.port = c.redis_nodes.front().port;
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
      writer_wake_(ex_),
      deadline_(ex_),
      backoff_timer_(ex_),
      backoff_(opts_.backoff_first, opts_.backoff_max),
      rng_(std::random_device{}()) {}

redis_connection::~redis_connection() = default;

void redis_connection::start() {
    if (started_) return;
    started_ = true;
    asio::co_spawn(ex_, run(shared_from_this()), report);
}

void redis_connection::stop() {
    if (stopped_) return;
    stopped_ = true;
    backoff_timer_.cancel();
    if (connected_) {
        drop_connection();  // serve() then fails what is outstanding with error::stopped
    } else {
        error_code ignored;
        socket_.close(ignored);  // cuts a connect in progress short
    }
}

awaitable<redis_connection::result> redis_connection::call_formatted(std::string command, bool resend_on_noscript,
                                                                     bool asking) {
    if (stopped_) co_return result{error::stopped, nullptr};
    if (!connected_ || !pipeline_.ready()) co_return result{error::not_ready, nullptr};
    const auto deadline = redis_clock::now() + opts_.timeout;
    // Its reply finds no waiter and is dropped; the pipeline keeps the two adjacent.
    if (asking) (void)pipeline_.push(format_command({"ASKING"}), deadline, false);
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

awaitable<bool> redis_connection::connect_socket() {
    using namespace asio::experimental::awaitable_operators;
    std::vector<tcp::endpoint> endpoints;
    error_code ec;
    auto literal = asio::ip::make_address(opts_.host, ec);
    if (!ec) {
        endpoints.emplace_back(literal, opts_.port);
    } else {
        tcp::resolver resolver(ex_);
        auto [rec, found] = co_await resolver.async_resolve(opts_.host, std::to_string(opts_.port), use_tuple);
        if (rec) {
            spdlog::warn("redis: cannot resolve {}: {}", opts_.host, rec.message());
            co_return false;
        }
        for (const auto& e : found) endpoints.push_back(e.endpoint());
    }
    if (stopped_) co_return false;

    socket_ = tcp::socket(ex_);
    asio::steady_timer timer(ex_, opts_.connect_timeout);
    auto outcome = co_await (asio::async_connect(socket_, endpoints, use_tuple) || timer.async_wait(use_tuple));
    error_code cec = outcome.index() == 0 ? std::get<0>(std::get<0>(outcome)) : asio::error::timed_out;
    if (cec || stopped_) {
        socket_.close(ec);
        spdlog::debug("redis: connecting to {}:{} failed: {}", opts_.host, opts_.port, cec.message());
        co_return false;
    }
    socket_.set_option(tcp::no_delay(true), ec);
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
        spdlog::error("redis: connection to {}:{} failed: {}", opts_.host, opts_.port, e.what());
        drop_connection();
    }
    auto failed = pipeline_.on_disconnect();
    fail_all(failed, stopped_ ? error::stopped : error::connection_lost);
    error_code ignored;
    socket_.close(ignored);
}

awaitable<void> redis_connection::read_loop() {
    std::string buf(read_chunk, '\0');
    while (connected_) {
        auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buf), use_tuple);
        if (!connected_) co_return;
        if (ec) {
            spdlog::info("redis: connection to {}:{} lost: {}", opts_.host, opts_.port, ec.message());
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
        case kind::resolved: finish(ev.request, error::none, std::move(ev.reply)); break;
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
                spdlog::info("redis: connected to {}:{}", opts_.host, opts_.port);
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
        auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(batch.bytes), use_tuple);
        (void)n;
        if (!connected_) co_return;
        if (ec) {
            spdlog::info("redis: write to {}:{} failed: {}", opts_.host, opts_.port, ec.message());
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
            spdlog::warn("redis: {}:{} stopped answering (oldest call older than {} ms), reconnecting", opts_.host,
                         opts_.port,
                         std::chrono::duration_cast<std::chrono::milliseconds>(opts_.stall_after()).count());
            drop_connection();
            co_return;
        }
    }
}

}  // namespace sluice::store
