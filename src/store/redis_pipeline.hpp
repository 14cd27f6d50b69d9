// The decisions of a pipelined Redis connection, without sockets (in the manner of
// Boost.Redis' writer_fsm / multiplexer): what to write next, which waiter a reply
// belongs to, who times out, when the connection must be rebuilt and how long to wait
// before reconnecting. redis_connection drives it with bytes and clock readings; the
// unit tests drive it by hand.
//
// Thread: none of these types lock; each instance belongs to one thread (a worker's).
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::store {

using redis_clock = std::chrono::steady_clock;

struct reply_deleter {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
// A parsed reply; owns it (freeReplyObject on destruction).
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// One command in the Redis protocol (RESP), formatted by hiredis (redisFormatCommandArgv).
std::string format_command(std::span<const std::string> argv);
std::string format_command(std::initializer_list<std::string_view> argv);

// An error reply starting with "NOSCRIPT": the EVALSHA did not run.
bool is_noscript_reply(const redisReply* r);
// An error reply starting with "READONLY": the node is a replica (it was demoted).
bool is_readonly_reply(const redisReply* r);

// Incremental RESP parser (hiredis' redisReader): feed bytes as they arrive, take whole
// replies out in order.
class reply_reader {
public:
    enum class status { reply, need_more, error };

    reply_reader();
    ~reply_reader();
    reply_reader(const reply_reader&) = delete;
    reply_reader& operator=(const reply_reader&) = delete;

    // False if the reader is in an error state (the stream is not RESP).
    bool feed(std::string_view bytes);
    // reply: `out` holds the next reply; need_more: no complete reply buffered;
    // error: protocol error, the connection must be dropped (error_text() says why).
    status next(reply_ptr& out);
    std::string error_text() const;
    // Forgets everything buffered (for a new connection).
    void reset();

private:
    redisReader* reader_ = nullptr;
};

// Reconnect delays: doubling from `first` up to `max`, each scaled by a jitter factor in
// [0.5, 1) so that many gateways do not reconnect in lock step.
class reconnect_backoff {
public:
    reconnect_backoff(redis_clock::duration first, redis_clock::duration max)
        : first_(first), max_(max), next_(first) {}
    // `random` in [0, 1): the caller's random draw (tests pass fixed values).
    redis_clock::duration next(double random);
    void reset() { next_ = first_; }

private:
    redis_clock::duration first_, max_, next_;
};

// The request queue and reply FIFO of one Redis connection.
//
// States: disconnected --on_connected()--> handshaking --last handshake reply--> ready;
// any state --on_disconnect()--> disconnected. Requests are accepted (push) only when
// ready; the handshake commands (AUTH, SELECT, SCRIPT LOAD) go through the same queue
// ahead of everything.
//
// A request lives in `queued` (not written) and then in `in flight` (written, awaiting its
// reply, in write order). Rules:
//  - one batch at a time: take_batch() hands out every queued command concatenated, and
//    nothing more until write_done();
//  - replies resolve in-flight entries strictly in order;
//  - expire(now): a queued request past its deadline is removed (never written); a written
//    one becomes a tombstone (its reply, when it comes, is discarded); both are reported
//    failed. If the oldest in-flight entry was written more than `stall_after` ago (or a
//    handshake step timed out) the connection must be rebuilt;
//  - NOSCRIPT for a request pushed with resend_on_noscript: the script is loaded again
//    (one SCRIPT LOAD ahead of every queued command) and the same bytes are queued right
//    behind it, up to `max_resends` times; any other failure after writing is never
//    resent;
//  - queued + in flight (tombstones included) never exceed max_in_flight.
class redis_pipeline {
public:
    using id = std::uint64_t;
    using time_point = redis_clock::time_point;
    enum class state { disconnected, handshaking, ready };

    struct options {
        std::size_t max_in_flight = 1024;
        redis_clock::duration stall_after = std::chrono::seconds(1);
        int max_resends = 2;
    };

    // `handshake`: formatted commands sent on every connect, in order; the reply to the
    // last one, if it is a bulk string, is kept as script_sha() (SCRIPT LOAD's answer).
    // `reload`: the formatted SCRIPT LOAD sent after a NOSCRIPT ("" = never resend).
    redis_pipeline(options o, std::vector<std::string> handshake, std::string reload);

    state current() const { return state_; }
    bool ready() const { return state_ == state::ready; }
    const std::string& script_sha() const { return sha_; }

    // A connection is up: queue the handshake, each step due within `handshake_timeout`.
    void on_connected(time_point now, redis_clock::duration handshake_timeout);

    // The connection is gone. Every request still queued or in flight is returned, to be
    // failed (none is resent); the queue and FIFO are emptied.
    std::vector<id> on_disconnect();

    enum class push_error { none, not_ready, overloaded };
    struct push_result {
        id request = 0;
        push_error error = push_error::none;
    };
    // Queues one formatted command, due by `deadline`.
    push_result push(std::string bytes, time_point deadline, bool resend_on_noscript = false);

    struct batch {
        std::string_view bytes;  // valid until write_done() or on_disconnect()
        std::size_t commands = 0;
    };
    // Everything queued, concatenated; the commands count as written from now on. Empty
    // while a batch is being written or when nothing is queued.
    batch take_batch(time_point now);
    void write_done();
    bool writing() const { return writing_; }

    struct reply_event {
        enum class kind {
            resolved,   // `request` gets `reply`
            discarded,  // the reply of a tombstone (or of an internal SCRIPT LOAD)
            resent,     // NOSCRIPT: the request was queued again (start a write)
            handshake,  // a handshake step succeeded; `became_ready` after the last
            failed,     // handshake error or a reply nobody waits for: rebuild the connection
        } what = kind::discarded;
        id request = 0;
        reply_ptr reply;
        bool became_ready = false;
        bool reload_queued = false;  // resent: a SCRIPT LOAD was queued for it
        std::string error;           // failed: why
    };
    reply_event on_reply(reply_ptr r);

    // Fails what is past its deadline (appended to `failed`); true if the connection must
    // be rebuilt (the head stalled, or the handshake timed out).
    bool expire(time_point now, std::vector<id>& failed);
    // The earliest instant expire() has something to do, if any.
    std::optional<time_point> next_deadline() const;

    std::size_t outstanding() const { return queue_.size() + in_flight_.size(); }
    std::size_t in_flight() const { return in_flight_.size(); }
    std::size_t queued() const { return queue_.size(); }

private:
    enum class kind : std::uint8_t { request, handshake, reload };
    struct entry {
        id request = 0;
        kind what = kind::request;
        bool resend_on_noscript = false;
        bool tombstone = false;
        int resends = 0;
        time_point deadline{};
        time_point written{};
        std::string bytes;  // kept after writing only when it may be resent
    };

    void queue_reload_and_resend(entry e);
    bool has_deadline(const entry& e) const { return e.what != kind::reload && !e.tombstone; }

    options opts_;
    std::vector<std::string> handshake_;
    std::string reload_;
    state state_ = state::disconnected;
    std::deque<entry> queue_;      // not written yet, in write order
    std::deque<entry> in_flight_;  // written, awaiting replies, in write order
    std::string out_;              // the batch being written
    bool writing_ = false;
    bool reload_pending_ = false;  // a SCRIPT LOAD is queued or in flight
    std::size_t handshake_left_ = 0;
    std::string sha_;
    id next_id_ = 1;
};

}  // namespace sluice::store
