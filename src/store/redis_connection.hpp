// One pipelined Redis connection on one worker's io_context (docs/design.md, "Concurrency").
//
// Every request of the worker shares it: call() queues a command and waits for its own
// reply; one writer sends everything queued in one write; replies resolve the callers in
// order. The decisions (timeouts, tombstones, the in-flight cap, NOSCRIPT resends, when
// to rebuild) are redis_pipeline's; this class owns the socket, the timers and the
// reconnect loop. Asio owns the TCP socket; hiredis only formats and parses.
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
#include "store/redis_pipeline.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
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

// Counters of one worker's Redis connection and store, written by that worker only and
// readable from any thread (the metrics registry sums them).
using metrics::redis_counters;

struct redis_connection_options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 6379;
    std::string username;  // "" = default user
    std::string password;  // "" = no AUTH
    unsigned database = 0;
    redis_clock::duration timeout = std::chrono::milliseconds(50);    // per call
    redis_clock::duration connect_timeout = std::chrono::seconds(1);  // TCP connect, then handshake
    std::size_t max_in_flight = 1024;
    redis_clock::duration backoff_first = std::chrono::milliseconds(50);
    redis_clock::duration backoff_max = std::chrono::seconds(1);  // docs/redis.md promises a second
    std::string script;                              // loaded on every connect and after NOSCRIPT; "" = none
    std::shared_ptr<boost::asio::ssl::context> tls;  // null = plain TCP; shared, only read
    std::string tls_server_name;                     // "" = the host connected to
    std::string sentinel_master;
    std::vector<config::host_port> sentinels;  // non-empty: the primary comes from them

    // From store.redis.*: the first node, the password read from the environment variable
    // named by password_env (unset or empty: no AUTH), TLS and Sentinel. With store.redis.tls
    // and no `tls` given, the context is built here (make_tls_context, which may throw).
    static redis_connection_options from(const config::store_config& c, std::string script,
                                         std::shared_ptr<boost::asio::ssl::context> tls = nullptr);
    // How long the oldest outstanding command may wait before the connection is rebuilt.
    redis_clock::duration stall_after() const;
};

// The client TLS context of store.redis.tls: peer verification against ca_file, the client
// certificate if given. Throws std::runtime_error naming the file that did not load.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const config::redis_tls_config& c);

class redis_connection : public std::enable_shared_from_this<redis_connection> {
public:
    enum class error { none, not_ready, overloaded, timeout, connection_lost, stopped };
    static const char* to_string(error e);

    struct result {
        error failure = error::none;
        reply_ptr reply;  // when failure == none: the reply (possibly an error reply)
        bool ok() const { return failure == error::none; }
    };

    // `counters` is shared: the connection may outlive its owner while it winds down.
    static std::shared_ptr<redis_connection> create(boost::asio::any_io_executor ex, redis_connection_options o,
                                                    std::shared_ptr<redis_counters> counters);
    ~redis_connection();
    redis_connection(const redis_connection&) = delete;
    redis_connection& operator=(const redis_connection&) = delete;

    // Begins connecting (in the background). Once.
    void start();
    // Closes the connection and fails every outstanding call; no reconnect after it.
    void stop();

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
    bool ready() const { return ready_.load(std::memory_order_acquire); }
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

    using tls_stream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>;

    boost::asio::awaitable<void> run(std::shared_ptr<redis_connection> self);
    boost::asio::awaitable<bool> connect_socket();
    // Resolves and connects `s`, then with TLS makes `tls` over it and shakes hands, all
    // before `timer` (armed by the caller) expires.
    boost::asio::awaitable<boost::system::error_code> open_stream(boost::asio::ip::tcp::socket& s,
                                                                  std::unique_ptr<tls_stream>& tls,
                                                                  const std::string& host, std::uint16_t port,
                                                                  boost::asio::steady_timer& timer);
    // One command on a connection of its own, within connect_timeout: the reply or null.
    boost::asio::awaitable<reply_ptr> ask_once(const config::host_port& to, std::vector<std::string> argv);
    // Asks the sentinels in order; sets host_ and port_ from the first that names a primary.
    boost::asio::awaitable<bool> find_primary();
    void note_failure(const std::string& what);
    // The +switch-master subscription, on one sentinel after another while not stopped.
    boost::asio::awaitable<void> watch_switches(std::shared_ptr<redis_connection> self);
    // Reads the subscription until its connection ends.
    boost::asio::awaitable<void> read_switches();
    void on_switch(std::string_view message);
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
    boost::asio::ip::tcp::socket socket_;
    std::unique_ptr<tls_stream> tls_;               // over socket_, made afresh for each connection
    std::string host_;                              // where this connection goes (a sentinel may change it)
    std::optional<config::host_port> switched_to_;  // the primary a +switch-master named, not yet used
    std::uint16_t port_ = 0;
    std::string last_failure_;               // logged at warn once, then at debug while it repeats
    boost::asio::steady_timer writer_wake_;  // condition variable of the idle writer
    boost::asio::steady_timer deadline_;     // the earliest deadline of the pipeline
    boost::asio::steady_timer backoff_timer_;
    boost::asio::ip::tcp::socket watch_socket_;  // the +switch-master subscription
    std::unique_ptr<tls_stream> watch_tls_;
    boost::asio::steady_timer watch_timer_;  // the pause between two subscriptions
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
