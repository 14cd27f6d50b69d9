// The Redis store: limit state lives in Redis, decided by the rate-limit script over the
// worker's transport (docs/design.md, "Concurrency" and "Limits and the data model"): one node's
// pipelined connection (store.type redis, Sentinel included) or a Redis Cluster
// (redis-cluster). A check whose identifiers one EVALSHA can hold (one node: any; a Cluster:
// one identifier, one hash slot) joins the batch of its slot for this turn of the event loop
// (turn_batcher: one EVALSHA decides up to 64 checks, each in turn as its own call would);
// a check of several identifiers on a Cluster is split, one EVALSHA per identifier, and
// taken back where admitted when another denies (cluster_split).
//
// Contract:
//  - try_check() answers without a round trip: 429 from the local deny cache while a
//    cached denial holds, an error at once while Redis is not ready; else nullopt.
//  - check() answers by store.redis.timeout: the decision, or an error (the caller applies
//    store.on_error). It never throws. A written EVALSHA is never resent (except after
//    NOSCRIPT, MOVED or ASK, when it did not run). A split check's calls (redirections and
//    undos included) share that one deadline (see cluster_split.hpp for its answers).
//  - take_back() answers by store.redis.timeout: one EVALSHA (mode undo) on one node, one per
//    identifier on a Cluster (cluster_split), never resent once written; false when any
//    failed (its outcome is then unknown). Checks that want a receipt join batches as others.
//  - A query (check_request::query) asks Redis every time (no deny cache, no batch); reset()
//    and control() (the admin's) answer by store.redis.timeout, never resent once written.
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
#include "store/redis_admin.hpp"
#include "store/redis_options.hpp"
#include "store/redis_transport.hpp"
#include "store/turn_batcher.hpp"

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
    // One EVALSHA per slot (a Cluster: per identifier) sent in the background; its failure
    // counts as an error.
    void change_lease(const limit::check_request& r, limit::lease_change c) override;
    boost::asio::awaitable<bool> take_back(limit::check_request r, limit::receipt rc, std::int64_t amount) override;
    // One EVALSHA (mode reset) per identifier, each on its slot, by store.redis.timeout.
    boost::asio::awaitable<bool> reset(limit::check_request r) override;
    // The controls' HASH (redis_admin: blocks and overrides), the script's mode control with
    // `args`, by store.redis.timeout; nullopt when it failed.
    boost::asio::awaitable<std::optional<redis_admin::control_reply>> control(std::vector<std::string> args);
    std::size_t keys_held() const override { return 0; }
    void on_reload() override;
    bool ready() const override;

    const redis_counters& counters() const { return *counters_; }

private:
    limit::check_result failed(const char* why);
    // A check with query set: one EVALSHA with the flag query per slot (a Cluster: per
    // identifier, the answers joined as one decision), never batched nor cached.
    boost::asio::awaitable<limit::check_result> query(limit::check_request r);
    // One batch of turn_batcher: one EVALSHA (format_call or format_batch) to `slot`.
    boost::asio::awaitable<void> send_batch(std::uint16_t slot, turn_batcher::requests rs,
                                            std::vector<limit::check_result>& out, redis_clock::time_point deadline);

    config::store_config config_;
    redis_connection_options conn_opts_;
    std::string key_prefix_;
    std::string sha_;  // the script's SHA1, as Redis names it
    std::shared_ptr<redis_counters> counters_;
    std::shared_ptr<redis_transport> transport_;  // null before start()
    std::unique_ptr<turn_batcher> batcher_;       // made by start()
    boost::asio::any_io_executor ex_;
    std::atomic<bool> started_{false};
    limit::deny_cache cache_;
    std::uint64_t generation_ = 0;  // bumped by on_reload(): a check begun before it caches nothing
};

}  // namespace sluice::store
