// A pool's in-flight cap (upstreams.<name>.max_in_flight): a concurrency tier on the pool's
// own identifier (kind upstream, the pool's name hashed), checked against the worker's store
// with the leases concurrency tiers use (docs/algorithms.md, "The in-flight cap of a pool").
// On Redis the slots are shared by every gateway of the fleet; on the memory store by the
// workers of one gateway.
//
// Past the cap a request waits in the pool's queue when it has one (queue.size per worker):
// it tries again at once when a request of this worker gives a slot of the pool back, and
// every 10 to 50 ms besides (a slot another gateway or worker frees makes no event here).
//
// Thread: the owning worker's thread only.
#pragma once

#include "limit/store.hpp"
#include "server/lease.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/intrusive/list.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace sluice::server {

struct worker;
struct snapshot;

// A request waiting for a slot.
struct cap_waiter : boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
    boost::asio::steady_timer* timer = nullptr;
    bool woken = false;  // a slot was given back since it last looked
};

// One worker's view of one pool's cap: the pool's identifier and the requests waiting.
struct cap_queue {
    limit::digest id{};
    std::size_t waiting = 0;
    boost::intrusive::list<cap_waiter, boost::intrusive::constant_time_size<false>> waiters;

    // A slot was given back here: the first waiter not told yet tries again now.
    void wake_one();
};

// Every pool's cap_queue on one worker, by pool name (a reload keeps a pool's waiters).
class cap_queues {
public:
    // The queue of pool `name`, its identifier hashed with `hash` on first use.
    template <class Hash>
    cap_queue& of(const std::string& name, Hash&& hash) {
        auto it = queues_.find(name);
        if (it == queues_.end()) {
            it = queues_.try_emplace(name).first;
            it->second.id = hash(name);
        }
        return it->second;
    }

private:
    std::map<std::string, cap_queue, std::less<>> queues_;
};

class upstream_cap {
public:
    explicit upstream_cap(worker& w) : w_(w) {}
    ~upstream_cap();
    upstream_cap(const upstream_cap&) = delete;
    upstream_cap& operator=(const upstream_cap&) = delete;

    enum class result {
        pass,        // taken, or the pool has no cap, or the store failed and store.on_error lets it through
        busy,        // 503 upstream_busy
        store_down,  // 503 store_unavailable (store.on_error: deny)
        left,        // the client went away while the request waited
    };
    // Takes a slot of pool `pool_index` of `snap` for the request about to be sent, waiting
    // in the pool's queue when it has one. The slot is held until release().
    boost::asio::awaitable<result> take(std::shared_ptr<const snapshot> snap, std::size_t pool_index);
    // The request's exchange is over: its slot (if any) is free, and a waiter is told.
    void release();
    // True while take() waits; leave() ends the wait (the client went away).
    bool waiting() const { return waiter_.is_linked(); }
    void leave();

private:
    void stop_waiting();

    worker& w_;
    held_lease lease_;
    cap_queue* queue_ = nullptr;
    limit::store_key key_;
    std::optional<boost::asio::steady_timer> timer_;
    cap_waiter waiter_;
    bool left_ = false;
};

}  // namespace sluice::server
