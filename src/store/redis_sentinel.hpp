// Redis Sentinel for one connection: which node is the primary of sentinel_master
// (SENTINEL get-master-addr-by-name, asked of the sentinels in order), and the
// +switch-master announcements of a failover (a subscription on one sentinel at a time).
// The replies are read by the pure functions in `sentinel::`, unit-tested without sockets.
//
// Contract:
//  - find_primary() asks each sentinel on a connection of its own, within connect_timeout
//    each, and answers with the first primary named; nullopt when none names one (logged at
//    warn, then at debug while the same failure repeats) or after stop().
//  - watch() stays subscribed, moving to the next sentinel (after backoff_max) when a
//    subscription ends, and calls on_switch with the new primary of each switch of
//    sentinel_master, until stop().
//  - stop() cuts a question and the subscription short.
//
// Thread: the executor's (one worker's io_context). The options outlive this object; hold
// it (through its owner) until the coroutines it runs have finished.
#pragma once

#include "config/config.hpp"
#include "store/redis_options.hpp"
#include "store/redis_stream.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::store {

namespace sentinel {

// The reply to SENTINEL get-master-addr-by-name: [host, port]; nullopt for anything else
// (a nil reply: the sentinel knows no such master).
std::optional<config::host_port> parse_master_addr(const redisReply* reply);

// The text of a +switch-master message, "<master> <old ip> <old port> <new ip> <new port>":
// the new primary when it is about `master`, else nullopt.
std::optional<config::host_port> parse_switch(std::string_view text, std::string_view master);

// A message of the +switch-master subscription, ["message", "+switch-master", text]: the new
// primary of `master` (parse_switch); nullopt for any other reply.
std::optional<config::host_port> parse_switch_message(const redisReply* reply, std::string_view master);

}  // namespace sentinel

class redis_sentinel {
public:
    redis_sentinel(const boost::asio::any_io_executor& ex, const redis_connection_options& o);

    // `current`: where the connection goes now (a different answer is logged at info).
    boost::asio::awaitable<std::optional<config::host_port>> find_primary(config::host_port current);
    boost::asio::awaitable<void> watch(std::function<void(config::host_port)> on_switch);
    void stop();

private:
    // Reads the subscription until its connection ends.
    boost::asio::awaitable<void> read_switches(const std::function<void(config::host_port)>& on_switch);
    void note_failure(const std::string& what);

    const redis_connection_options& opts_;
    redis_stream ask_;                 // find_primary()'s questions, one at a time
    redis_stream watch_;               // the +switch-master subscription
    boost::asio::steady_timer pause_;  // between two subscriptions
    std::string last_failure_;         // logged at warn once, then at debug while it repeats
    bool stopped_ = false;
};

}  // namespace sluice::store
