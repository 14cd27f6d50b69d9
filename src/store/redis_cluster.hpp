// One worker's view of a Redis Cluster (docs/design.md, "The Cluster design"): the slot
// map, one pipelined redis_connection per node (each loads the script on connect), and
// the routing of a command to the node that serves its slot.
//
// Contract:
//  - call() sends one command for one slot (in RESP, every key of it in that slot) and
//    answers by `deadline`, after following redirections: MOVED updates the map and resends
//    (the command did not run there); ASK resends once to the target, after ASKING; three
//    redirections at most. Any other reply, TRYAGAIN and CLUSTERDOWN included, is the
//    caller's.
//  - The map is read (CLUSTER SLOTS, from any connected node, else from the seeds) at
//    start, every 5 s, and soon after a MOVED or a failed call (at most every 200 ms).
//  - Connections are never closed before stop(): a demoted or lost node reconnects in the
//    background and costs nothing while no slot maps to it.
//
// Thread: create it, start(), call() and stop() on the worker's thread (its executor);
// ready() and usable() from any thread. Hold it in a shared_ptr (background coroutines).
#pragma once

#include "store/cluster_slots.hpp"
#include "store/redis_connection.hpp"
#include "store/redis_transport.hpp"

#include <boost/asio/steady_timer.hpp>

#include <array>
#include <atomic>
#include <memory>
#include <vector>

namespace sluice::store {

class redis_cluster final : public redis_transport, public std::enable_shared_from_this<redis_cluster> {
public:
    // `base`: the options of every node's connection (host and port are replaced).
    static std::shared_ptr<redis_cluster> create(boost::asio::any_io_executor ex, redis_connection_options base,
                                                 std::vector<config::host_port> seeds,
                                                 std::shared_ptr<redis_counters> counters);
    redis_cluster(const redis_cluster&) = delete;
    redis_cluster& operator=(const redis_cluster&) = delete;

    void start() override;
    void stop() override;

    // A request of one identifier: the slot of its HASH's hash tag; of several: nullopt (one
    // call per identifier, each in its own slot).
    std::optional<std::uint16_t> slot_of(const limit::check_request& r, std::string_view key_prefix) const override;
    boost::asio::awaitable<redis_result> call(std::uint16_t slot, std::string command, bool evalsha,
                                              redis_clock::time_point deadline) override;

    // Every slot has a node and every such node's connection is ready. Any thread.
    bool ready() const override { return ready_.load(std::memory_order_acquire); }
    // A slot map is known (calls may succeed). Any thread.
    bool usable() const override { return usable_.load(std::memory_order_acquire); }

private:
    struct node {
        config::host_port address;
        std::shared_ptr<redis_connection> conn;
    };

    redis_cluster(boost::asio::any_io_executor ex, redis_connection_options base, std::vector<config::host_port> seeds,
                  std::shared_ptr<redis_counters> counters);

    // The node at `a`, connecting to it if it is new.
    std::size_t node_at(const config::host_port& a);
    boost::asio::awaitable<void> maintain(std::shared_ptr<redis_cluster> self);
    boost::asio::awaitable<void> refresh();
    void install(const std::vector<cluster::slot_range>& ranges);
    void want_refresh();
    void update_ready();

    boost::asio::any_io_executor ex_;
    redis_connection_options base_;
    std::vector<config::host_port> seeds_;
    std::shared_ptr<redis_counters> counters_;
    std::vector<node> nodes_;
    std::array<std::int16_t, cluster::slot_count> slots_;  // node index, -1: unknown
    boost::asio::steady_timer wake_;
    bool refresh_wanted_ = true;
    bool stopped_ = false;
    std::atomic<bool> ready_{false};
    std::atomic<bool> usable_{false};
};

}  // namespace sluice::store
