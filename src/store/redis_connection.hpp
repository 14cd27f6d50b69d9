// One pipelined Redis connection on one worker's io_context (docs/design.md, "Concurrency").
//
// Every request of the worker shares it: call() queues a command and waits for its own
// reply; one writer sends everything queued in one write; replies resolve the callers in
// order. The decisions (timeouts, tombstones, the in-flight cap, NOSCRIPT resends, when
// to rebuild) are redis_pipeline's; the bytes go through redis_stream (TCP or TLS); the
// primary of a Sentinel deployment comes from redis_sentinel. This class owns the waiters,
// the timers and the reconnect loop. Asio owns the socket; hiredis only formats and parses.
//
// Contract:
//  - call() answers by its deadline (options.timeout) at the latest, and at once while
//    disconnected, while the handshake runs, or when max_in_flight calls are outstanding.
//    A command that was written is never sent again, except after NOSCRIPT (it did not
//    run): then the script is loaded again and the same command resent transparently.
//  - After start(), it connects in the background and after any loss reconnects with
//    exponential backoff (with jitter); on connect: AUTH (if a password is set), SELECT
//    (if database != 0), SCRIPT LOAD of options.script (if not empty), then ready.
//  - With options.tls, every connection (sentinels included) is TLS: the server's
//    certificate must chain to the context's CA and name tls_server_name (or the host).
//  - With options.sentinels, each connect first asks them in order for the primary of
//    sentinel_master; a lost connection asks again (how a failover is followed). One
//    sentinel at a time is also subscribed to +switch-master: a switch away from the node
//    this connection uses drops it (a demoted primary may take seconds to refuse writes),
//    and the next connect goes to the primary the switch named (the sentinel asked first
//    may not know of it yet).
//  - An error reply starting with READONLY (the node is a replica now) is that call's
//    answer, and the connection is dropped so that the next connect looks again.
//
// Thread: create it, call start(), call(), stop() and script_sha() on the thread running
// its executor (one worker's io_context). ready() from any thread. Hold it in a
// shared_ptr: its background coroutines keep it alive until they have finished.
#pragma once

#include "config/config.hpp"
#include "metrics/metrics.hpp"
#include "store/redis_options.hpp"
#include "store/redis_pipeline.hpp"
#include "store/redis_sentinel.hpp"
#include "store/redis_stream.hpp"
#include "store/redis_transport.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::store {

class redis_connection final : public redis_transport, public std::enable_shared_from_this<redis_connection> {
public:
    using error = redis_error;
    using result = redis_result;
    static const char* to_string(error e) { return store::to_string(e); }

    // `counters` is shared: the connection may outlive its owner while it winds down.
    static std::shared_ptr<redis_connection> create(boost::asio::any_io_executor ex, redis_connection_options o,
                                                    std::shared_ptr<redis_counters> counters);
    ~redis_connection();
    redis_connection(const redis_connection&) = delete;
    redis_connection& operator=(const redis_connection&) = delete;

    // Begins connecting (in the background). Once.
    void start() override;
    // Closes the connection and fails every outstanding call; no reconnect after it.
    void stop() override;

    // The transport: every request in one call (slot 0); `slot` is not looked at.
    std::optional<std::uint16_t> slot_of(const limit::check_request&, std::string_view) const override { return 0; }
    boost::asio::awaitable<result> call(std::uint16_t, std::string command, bool evalsha,
                                        redis_clock::time_point deadline) override {
        return call_formatted(std::move(command), evalsha, false, deadline);
    }

    // Sends one command. resend_on_noscript: it is an EVALSHA of options.script. asking:
    // ASKING goes just before it (Redis Cluster, a slot being migrated here).
    // The argv is taken by value (coroutine argument).
    boost::asio::awaitable<result> call(std::vector<std::string> argv, bool resend_on_noscript = false,
                                        bool asking = false) {
        return call_formatted(format_command(argv), resend_on_noscript, asking);
    }
    // The same, for a command already in RESP (format_command()), answered by `deadline`
    // (default: options.timeout from now).
    boost::asio::awaitable<result> call_formatted(std::string command, bool resend_on_noscript, bool asking,
                                                  std::optional<redis_clock::time_point> deadline = std::nullopt);

    // Connected and the handshake (script included) done. Any thread.
    bool ready() const override { return ready_.load(std::memory_order_acquire); }
    bool usable() const override { return ready(); }
    // The SHA1 of options.script as Redis reported it; "" before the first connect.
    const std::string& script_sha() const { return pipeline_.script_sha(); }
    std::size_t outstanding() const { return pipeline_.outstanding(); }

private:
    struct waiter {
        result* out = nullptr;
        boost::asio::any_completion_handler<void()> wake;
    };

    redis_connection(boost::asio::any_io_executor ex, redis_connection_options o,
                     std::shared_ptr<redis_counters> counters);

    boost::asio::awaitable<void> run(std::shared_ptr<redis_connection> self);
    boost::asio::awaitable<bool> connect_socket();
    void note_failure(const std::string& what);
    // The +switch-master subscription (with sentinels), until stop().
    boost::asio::awaitable<void> watch_switches(std::shared_ptr<redis_connection> self);
    void on_switch(config::host_port primary);
    boost::asio::awaitable<void> serve();
    boost::asio::awaitable<void> read_loop();
    boost::asio::awaitable<void> write_loop();
    boost::asio::awaitable<void> deadline_loop();
    boost::asio::awaitable<void> wait_for(redis_clock::duration d);

    bool on_reply(reply_ptr r);
    void finish(redis_pipeline::id request, error failure, reply_ptr reply = nullptr);
    void fail_all(const std::vector<redis_pipeline::id>& ids, error failure);
    void wake_writer();
    void arm_deadline(redis_clock::time_point t);
    void drop_connection();

    boost::asio::any_io_executor ex_;
    redis_connection_options opts_;
    std::shared_ptr<redis_counters> counters_;
    redis_pipeline pipeline_;
    reply_reader reader_;
    redis_stream stream_;
    std::unique_ptr<redis_sentinel> sentinel_;      // with options.sentinels
    std::string host_;                              // where this connection goes (a sentinel may change it)
    std::optional<config::host_port> switched_to_;  // the primary a +switch-master named, not yet used
    std::uint16_t port_ = 0;
    std::string last_failure_;               // logged at warn once, then at debug while it repeats
    boost::asio::steady_timer writer_wake_;  // condition variable of the idle writer
    boost::asio::steady_timer deadline_;     // the earliest deadline of the pipeline
    boost::asio::steady_timer backoff_timer_;
    redis_clock::time_point deadline_armed_ = redis_clock::time_point::max();
    std::unordered_map<redis_pipeline::id, waiter> waiters_;
    std::vector<redis_pipeline::id> expired_;  // reused by the deadline loop
    reconnect_backoff backoff_;
    std::minstd_rand rng_;
    std::atomic<bool> ready_{false};
    bool started_ = false;
    bool stopped_ = false;
    bool connected_ = false;
    bool ever_connected_ = false;
};

}  // namespace sluice::store
