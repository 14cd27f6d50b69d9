// A pool as one worker runs it: a `slot` per server (its idle keep-alive connections, TLS
// session and requests in flight, the worker's own), the balancer's state, and the retry
// budget. refresh() follows the pool's members: the slots of servers that stay are kept,
// with their idle connections.
//
// Thread: the owning worker's thread only. A request holds its slot (shared_ptr) while it
// uses one of its connections, so a server that leaves the pool meanwhile is not freed
// under it.
#pragma once

#include "metrics/metrics.hpp"
#include "proxy/pool.hpp"
#include "tls/client_context.hpp"
#include "upstream/pool.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <array>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace sluice::upstream {

struct slot {
    slot(std::shared_ptr<server> s, const boost::asio::any_io_executor& ex, std::size_t max_idle, metrics::shard& m)
        : srv(std::move(s)), idle(ex, max_idle, m) {
        srv->counts.attach(&counters);
    }
    ~slot() { srv->counts.detach(&counters); }
    slot(const slot&) = delete;
    slot& operator=(const slot&) = delete;
    std::shared_ptr<server> srv;
    tls::session_cache sessions;  // its last TLS session; before `idle`, whose connections point to it
    proxy::pool idle;
    std::uint32_t in_flight = 0;
    slot_counters counters;  // attached to srv->counts while the slot lives
};

class lane {
public:
    // `before`: the lane of the pool of the same name before a reload, whose slots of the
    // servers that stay are taken over (their idle connections with them).
    lane(std::shared_ptr<pool> p, const boost::asio::any_io_executor& ex, metrics::shard& m,
         const lane* before = nullptr);
    ~lane();
    lane(const lane&) = delete;
    lane& operator=(const lane&) = delete;

    const std::shared_ptr<pool>& shared() const { return pool_; }
    pool& owner() const { return *pool_; }

    // A server for a request, none of whose slots is in `tried`; null when no server is
    // available. `hash`: the caller's identifier hash (balance hash).
    std::shared_ptr<slot> pick(std::uint64_t hash, std::span<const slot* const> tried);
    const std::vector<std::shared_ptr<slot>>& slots() const { return slots_; }
    // This worker's counts for the pool (attached to owner().counts() while the lane lives).
    lane_counters& counters() { return counters_; }

    // The retry budget: a request to the pool counted; whether one more retry fits
    // (retry_budget percent of the last 10 s of requests, plus 3), counting it if so.
    void count_request(clock::time_point now);
    bool take_retry(clock::time_point now);

    // Closes every idle connection and keeps none from now on (a drain).
    void close_all();

private:
    void refresh();
    struct second {
        std::int64_t at = -1;  // whole seconds of clock
        std::uint32_t requests = 0, retries = 0;
    };
    second& bucket(clock::time_point now);

    std::shared_ptr<pool> pool_;
    boost::asio::any_io_executor ex_;
    metrics::shard& metrics_;
    std::uint64_t version_ = 0;
    std::shared_ptr<const members> members_;
    std::vector<std::shared_ptr<slot>> slots_;  // members_->servers' order
    round_robin rr_;
    std::mt19937_64 random_{std::random_device{}()};
    std::vector<unsigned> weights_;  // pick()'s, kept for its capacity
    std::vector<std::uint32_t> in_flight_;
    std::array<second, 10> budget_{};
    bool closed_ = false;
    lane_counters counters_;
};

}  // namespace sluice::upstream
