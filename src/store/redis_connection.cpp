#include "store/redis_connection.hpp"

#include "base/async.hpp"
#include "base/units.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::store {

namespace asio = boost::asio;
using asio::awaitable;
using boost::system::error_code;

namespace {

using base::use_tuple;
constexpr std::size_t read_chunk = 16 * base::KiB;

// Not formatted inside a coroutine: GCC 12 mishandles a braced list there.
const std::string& asking_command() {
    static const std::string command = format_command({"ASKING"});
    return command;
}

}  // namespace

std::shared_ptr<redis_connection> redis_connection::create(asio::any_io_executor ex, redis_connection_options o,
                                                           std::shared_ptr<redis_counters> counters) {
    return std::shared_ptr<redis_connection>(new redis_connection(std::move(ex), std::move(o), std::move(counters)));
}

redis_connection::redis_connection(asio::any_io_executor ex, redis_connection_options o,
                                   std::shared_ptr<redis_counters> counters)
    : ex_(std::move(ex)),
      opts_(std::move(o)),
      counters_(std::move(counters)),
      pipeline_({opts_.max_in_flight, opts_.stall_after()}, opts_.handshake_commands(), opts_.reload_command()),
      stream_(ex_, opts_),
      sentinel_(opts_.sentinels.empty() ? nullptr : std::make_unique<redis_sentinel>(ex_, opts_)),
      host_(opts_.host),
      port_(opts_.port),
      writer_wake_(ex_),
      deadline_(ex_),
      backoff_timer_(ex_),
      backoff_(opts_.backoff_first, opts_.backoff_max),
      rng_(std::random_device{}()) {}

redis_connection::~redis_connection() = default;

void redis_connection::start() {
    if (started_) return;
    started_ = true;
    asio::co_spawn(ex_, run(shared_from_this()), base::log_exception("redis connection"));
    if (sentinel_) asio::co_spawn(ex_, watch_switches(shared_from_this()), base::log_exception("redis sentinel watch"));
}

void redis_connection::stop() {
    if (stopped_) return;
    stopped_ = true;
    backoff_timer_.cancel();
    if (sentinel_) sentinel_->stop();
    if (connected_) {
        drop_connection();  // serve() then fails what is outstanding with error::stopped
    } else {
        stream_.close();  // cuts a connect in progress short
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
    stream_.close();
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

awaitable<void> redis_connection::watch_switches(std::shared_ptr<redis_connection> self) {
    co_await sentinel_->watch([this](config::host_port primary) { on_switch(std::move(primary)); });
    (void)self;
}

void redis_connection::on_switch(config::host_port primary) {
    // The next connect goes there, not to whatever the first sentinel asked believes now.
    switched_to_ = std::move(primary);
    if (connected_ && (switched_to_->host != host_ || switched_to_->port != port_)) drop_connection();
}

awaitable<bool> redis_connection::connect_socket() {
    if (switched_to_) {
        spdlog::info("redis: +switch-master names {}:{} as the primary of {}", switched_to_->host, switched_to_->port,
                     opts_.sentinel_master);
        host_ = switched_to_->host;
        port_ = switched_to_->port;
        switched_to_.reset();
    } else if (sentinel_) {
        config::host_port current{host_, port_};  // (not a braced operand of co_await: GCC 12)
        auto primary = co_await sentinel_->find_primary(std::move(current));
        if (!primary) co_return false;
        host_ = std::move(primary->host);
        port_ = primary->port;
    }
    if (stopped_) co_return false;
    asio::steady_timer timer(ex_, opts_.connect_timeout);
    auto ec = co_await stream_.open(host_, port_, timer);
    if (!ec && switched_to_ && (switched_to_->host != host_ || switched_to_->port != port_))
        ec = asio::error::operation_aborted;  // a switch came during the connect: go there instead
    if (ec || stopped_) {
        stream_.reset();
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
    stream_.reset();
}

awaitable<void> redis_connection::read_loop() {
    std::string buf(read_chunk, '\0');
    while (connected_) {
        auto [ec, n] = co_await stream_.read_some(asio::buffer(buf));
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
        auto [ec, n] = co_await stream_.write_all(asio::buffer(batch.bytes));
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
