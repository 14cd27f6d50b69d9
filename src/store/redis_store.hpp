// The Redis store: limit state lives in Redis, decided by the rate-limit script over the
// worker's pipelined connection (docs/design.md, "Concurrency" and "Limits and the data model"):
// on one node, one EVALSHA decides the checks asked during one turn of the worker's event
// loop (up to max_batch), each in turn as its own call would. With store.type
// redis-cluster, one EVALSHA per identifier (each is one hash slot; the checks of one turn
// with a single identifier are batched by slot), sent in parallel to the nodes serving
// them; when one denies, the commits of the others are taken back
// (redis_script::build_undo), so a denied request leaves every tier as it found it unless
// the same identifier was admitted in between (then its cost stays counted:
// under-admission, never over-admission).
//
// Contract:
//  - try_check() answers without a round trip: 429 from the local deny cache while a
//    cached denial holds, an error at once while Redis is not ready; else nullopt.
//  - check() answers by store.redis.timeout: the decision, or an error (the caller applies
//    store.on_error). It never throws. A written EVALSHA is never resent (except after
//    NOSCRIPT, MOVED or ASK, when it did not run). On a cluster, every call of a check
//    (redirections and undos included) shares that one deadline; a denial by any node is
//    the answer even when another node failed (the admitted parts are taken back, the
//    failed ones cannot be: their outcome is unknown); with no denial, a failure is an
//    error (and nothing is taken back: the request may still be forwarded).
//  - keys_held() is 0: Redis holds the identifiers (the deny cache's size is in
//    counters().deny_cache_size).
//
// Thread: one store per worker. start(), stop(), try_check(), check() and on_reload() on
// that worker's thread (its io_context). ready(), keys_held() and counters() from any
// thread. Call stop() and let the io_context run before destroying the io_context.
#pragma once

#include "config/config.hpp"
#include "limit/deny_cache.hpp"
#include "limit/store.hpp"
#include "store/redis_cluster.hpp"
#include "store/redis_connection.hpp"
#include "store/redis_script.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::store {

struct redis_store_options {
    std::size_t deny_cache_max = 10'000;
    std::size_t max_in_flight = 1024;
    std::string script;  // the rate-limit script's source; "" = the embedded lua/rate_limit.lua
    // The TLS context of store.redis.tls, built once and shared by every worker's store;
    // null with store.redis.tls set: this store builds its own (the constructor may throw).
    std::shared_ptr<boost::asio::ssl::context> tls;
};

class redis_store final : public limit::store {
public:
    explicit redis_store(const config::store_config& c, const redis_store_options& o = {});
    ~redis_store() override;
    redis_store(const redis_store&) = delete;
    redis_store& operator=(const redis_store&) = delete;

    // Starts connecting on `ex` (the worker's io_context), in the background. Once.
    void start(boost::asio::any_io_executor ex);
    // Fails outstanding checks; no reconnect after it.
    void stop() override;

    std::optional<limit::check_result> try_check(const limit::check_request& r) override;
    boost::asio::awaitable<limit::check_result> check(limit::check_request r) override;
    // One EVALSHA (a cluster: one per identifier) sent in the background; its failure counts
    // as an error.
    void change_lease(const limit::check_request& r, limit::lease_change c) override;
    std::size_t keys_held() const override { return 0; }
    void on_reload() override;
    bool ready() const override;

    const redis_counters& counters() const { return *counters_; }
    // For tests: the connection (null before start(), and with a cluster).
    redis_connection* connection() { return conn_.get(); }

private:
    limit::check_result failed(const char* why);
    bool can_call() const;
    boost::asio::awaitable<limit::check_result> decide_on_cluster(const limit::check_request& r,
                                                                  redis_clock::time_point deadline);
    // One identifier of `r` on the node serving its slot; with `undo`, its commit's record
    // (flag undo); with flag query, only checked.
    boost::asio::awaitable<limit::check_result> decide_part(limit::check_request r, std::size_t key,
                                                            redis_script::call_flag flag,
                                                            redis_script::undo_record* undo,
                                                            redis_clock::time_point deadline);
    // Joins the turn's batch for `slot` (one node: always 0), or leads it (see batch below).
    boost::asio::awaitable<limit::check_result> decide_batched(const limit::check_request& r, std::uint16_t slot,
                                                               redis_clock::time_point deadline);
    // Takes back identifier `key`'s commit `u`.
    boost::asio::awaitable<void> undo_part(limit::check_request r, std::size_t key, const redis_script::undo_record* u,
                                           redis_clock::time_point deadline);

    redis_connection_options conn_opts_;
    std::string key_prefix_;
    std::shared_ptr<redis_counters> counters_;
    std::shared_ptr<redis_connection> conn_;  // store.type redis
    std::vector<config::host_port> seeds_;    // store.type redis-cluster: its seed nodes
    std::shared_ptr<redis_cluster> cluster_;  // store.type redis-cluster
    std::string cluster_sha_;                 // the script's SHA1, the same on every node
    boost::asio::any_io_executor ex_;
    std::atomic<bool> started_{false};
    limit::deny_cache cache_;
    // The batch of this turn: the first check of a turn leads it. It yields once (post), so
    // that the checks the rest of the turn asks join it, then sends them all as one EVALSHA
    // and hands each its result. A check that finds it full leads the next. On a cluster,
    // a batch per hash slot (every key of an EVALSHA must lie in one slot): the checks of
    // one identifier, or of identifiers that share a slot, with one identifier each.
    struct batch_member {
        const limit::check_request* request = nullptr;
        limit::check_result* out = nullptr;
        boost::asio::any_completion_handler<void()> wake;
    };
    struct batch {
        std::vector<batch_member> members;  // the leader's request is not among them
    };
    struct open_batch {
        std::uint16_t slot = 0;
        batch* b = nullptr;  // in its leader's coroutine frame
    };
    static constexpr std::size_t max_batch = 64;
    std::vector<open_batch> open_batches_;  // at most one per slot (one node: slot 0)
    std::size_t batched_ = 0;               // checks in batches, open or sent, not answered (<= max_in_flight)
    std::uint64_t generation_ = 0;          // bumped by on_reload(): a check begun before it caches nothing
};

}  // namespace sluice::store
