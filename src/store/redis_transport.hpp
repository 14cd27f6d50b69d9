// How the Redis store reaches Redis: one interface, implemented by one node's pipelined
// connection (redis_connection, which also follows a Sentinel failover) and by a Redis
// Cluster (redis_cluster, which routes by hash slot). The store decides, batches and
// splits; the transport only carries one command to where its slot is served.
//
// Thread: a transport belongs to one worker: start(), stop(), slot_of() and call() on the
// thread running its executor; ready() and usable() from any thread. Held in a shared_ptr
// (its background coroutines keep it alive until they have finished).
#pragma once

#include "config/config.hpp"
#include "limit/store.hpp"
#include "metrics/metrics.hpp"
#include "store/redis_options.hpp"
#include "store/redis_pipeline.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::store {

// Counters of one worker's Redis connection and store, written by that worker only and
// readable from any thread (the metrics registry sums them).
using metrics::redis_counters;

// Why a call has no reply: the one vocabulary of the Redis store's failures. Turned into
// text (to_string) only where it is logged or becomes a check's error.
enum class redis_error { none, not_ready, overloaded, timeout, connection_lost, stopped };
const char* to_string(redis_error e);

struct redis_result {
    redis_error failure = redis_error::none;
    reply_ptr reply;  // when failure == none: the reply (possibly an error reply)
    bool ok() const { return failure == redis_error::none; }
};

class redis_transport {
public:
    virtual ~redis_transport() = default;

    // Begins connecting (in the background). Once.
    virtual void start() = 0;
    // Fails every outstanding call; no reconnect after it.
    virtual void stop() = 0;
    // Every slot is served by a ready connection. Any thread.
    virtual bool ready() const = 0;
    // A call may succeed (a Cluster with a node lost still serves the other nodes' slots).
    // Any thread.
    virtual bool usable() const = 0;

    // The slot of one EVALSHA holding every identifier of `r` (named with `key_prefix`), or
    // nullopt when one call cannot hold them: a Cluster needs one call per identifier when
    // there are several. One node: slot 0 for any request.
    virtual std::optional<std::uint16_t> slot_of(const limit::check_request& r, std::string_view key_prefix) const = 0;

    // Sends one command (RESP, every key of it in `slot`) and answers by `deadline`.
    // evalsha: it is an EVALSHA of the script, resent (transparently) after NOSCRIPT. A
    // written command is never sent again otherwise, except after a Cluster's MOVED or ASK.
    virtual boost::asio::awaitable<redis_result> call(std::uint16_t slot, std::string command, bool evalsha,
                                                      redis_clock::time_point deadline) = 0;
};

// The transport store.type asks for: one node (or Sentinel's primary) for redis; for
// redis-cluster, the Cluster whose seeds are store.redis.nodes. Not started.
std::shared_ptr<redis_transport> make_transport(boost::asio::any_io_executor ex, const config::store_config& c,
                                                redis_connection_options o, std::shared_ptr<redis_counters> counters);

}  // namespace sluice::store
