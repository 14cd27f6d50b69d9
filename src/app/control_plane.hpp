// The admin API on single callers (docs/operations.md, "Admin endpoints"): an identifier's
// state read from the store or reset (/identities/<kind>/<value>), blocks and overrides
// (/identities/<kind>/<value>/block, /overrides), and keeping the workers' blocks and
// overrides (limit::controls) in step with where they live.
//
// Where they live: with store.type memory, in this gateway (lost at a restart); on Redis
// (Sentinel and Cluster included), in one HASH of the store, "<prefix>{sluice:controls}",
// with a version each change bumps, so that every gateway of a fleet applies them: each
// gateway reads the version every second (one EVALSHA, on a worker's connection), and the
// entries when it changed. A gateway that made a change reads it back at once. Each new set
// is built into an immutable limit::controls and posted to every worker, whose store drops
// its cached denials then (a reset is also a change of version, for the same reason). A
// config reload keeps them. Entries past their end are left out at once and pruned from the
// store by the next poll of any gateway.
//
// Store operations run on a worker's thread, where its store lives (stores are per worker):
// on_worker() spawns the operation on that worker's io_context and resumes the caller here,
// on the main thread, with its answer (workers taken in turn).
//
// Thread: the main thread (its io_context) only.
#pragma once

#include "app/admin.hpp"
#include "identity/hasher.hpp"
#include "limit/controls.hpp"
#include "metrics/metrics.hpp"
#include "server/snapshot.hpp"
#include "server/worker.hpp"
#include "store/redis_store.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::app {

class control_plane {
public:
    struct worker_link {
        server::worker* worker;
        store::redis_store* redis;  // its Redis store; null on the memory store
    };

    control_plane(boost::asio::io_context& main, std::vector<worker_link> workers, identity::hasher hasher,
                  std::function<std::shared_ptr<const server::snapshot>()> snapshot, metrics::registry& metrics);

    // Reads the stored controls once (on Redis), posts them to the workers, then calls
    // `next`, whether the read succeeded or not (it is tried again every second).
    void load_then(std::function<void()> next);
    // The poll (every second: the version on Redis, the entries' ends everywhere).
    void start();
    void stop();

    // GET, DELETE /identities/<kind>/<value>; POST, DELETE /identities/<kind>/<value>/block;
    // PUT, DELETE /overrides/<kind>/<value>; GET /overrides.
    boost::asio::awaitable<admin_reply> handle(const admin_request& req);

    // (blocks, overrides) in effect, for sluice_admin_controls.
    std::pair<std::size_t, std::size_t> counts() const;

    // The next worker, in turn, for a store operation.
    const worker_link& next_worker() { return workers_[next_worker_++ % workers_.size()]; }
    // Runs `op` (a store operation of worker `w`, not started) on w's thread, and answers on
    // the caller's (the main thread).
    template <class R>
    static boost::asio::awaitable<R> on_worker(const worker_link& w, boost::asio::awaitable<R> op) {
        auto out = co_await boost::asio::co_spawn(w.worker->ioc, std::move(op), boost::asio::use_awaitable);
        co_return out;
    }

private:
    struct identity_ref;
    struct tier_set;

    bool shared() const { return workers_.front().redis != nullptr; }
    // The store's controls: the script's mode control on Redis, this gateway's map on the
    // memory store. After a change, read back and published. False when the store failed.
    boost::asio::awaitable<bool> change(std::vector<std::string> args);
    // Reads the controls (on Redis, when `force` or their version changed), prunes the
    // entries past their end, and publishes a new snapshot when anything changed.
    boost::asio::awaitable<bool> refresh(bool force);
    void publish(std::vector<limit::control_record> records);
    boost::asio::awaitable<void> poll();

    boost::asio::awaitable<admin_reply> identity_get(const identity_ref& who);
    boost::asio::awaitable<admin_reply> identity_reset(const identity_ref& who, std::string_view query);
    boost::asio::awaitable<admin_reply> block(const identity_ref& who, std::string_view query);
    boost::asio::awaitable<admin_reply> unblock(const identity_ref& who);
    boost::asio::awaitable<admin_reply> override_set(const identity_ref& who, std::string_view body);
    boost::asio::awaitable<admin_reply> override_end(const identity_ref& who, std::string_view query);
    admin_reply overrides_list() const;
    std::vector<tier_set> tier_sets(const identity_ref& who) const;
    void log_action(std::string_view action, const identity_ref* who, const admin_request& req, unsigned status,
                    std::string_view detail = {});

    boost::asio::io_context& main_;
    std::vector<worker_link> workers_;
    std::size_t next_worker_ = 0;
    identity::hasher hasher_;
    std::function<std::shared_ptr<const server::snapshot>()> snapshot_;
    metrics::registry& metrics_;
    boost::asio::steady_timer timer_{main_};
    bool stopped_ = false;
    bool busy_ = false;  // a refresh under way: the poll skips its turn
    // The stored entries as last read (Redis) or as held (memory): field -> value.
    std::map<std::string, std::string> entries_;
    std::optional<std::int64_t> version_;  // Redis: the version last read (none: never read)
    limit::controls_ptr current_;
};

}  // namespace sluice::app
