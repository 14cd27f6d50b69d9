// One worker thread's world: its io_context, acceptor, live connections, upstream pool,
// config snapshot and metric shard. Nothing here is shared with another worker.
//
// Thread: everything but `ioc.stop()` runs on the worker's own thread; the app posts
// begin_drain() to it.
#pragma once

#include "config/config.hpp"
#include "http/deadline_sweep.hpp"
#include "identity/hasher.hpp"
#include "limit/controls.hpp"
#include "limit/offenders.hpp"
#include "limit/store.hpp"
#include "metrics/metrics.hpp"
#include "server/access_log.hpp"
#include "server/lease.hpp"
#include "server/snapshot.hpp"
#include "server/upstream_cap.hpp"
#include "upstream/lane.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <memory>
#include <vector>

namespace sluice::server {

using http::clock;
using http::deadline_sweep;

// What a worker's acceptor serves: the proxy in plain HTTP or TLS, or the HTTP check.
enum class listener_kind { plain, tls, check };

struct worker {
    worker(std::shared_ptr<const snapshot> s, metrics::shard& m, std::atomic<std::size_t>& open_conns,
           std::size_t max_conns, limit::store& st, identity::hasher h);

    boost::asio::io_context ioc{1};
    // The current snapshot, behind a control block of this worker's own: copying it per
    // request touches no cache line another worker writes.
    std::shared_ptr<const snapshot> snap;
    metrics::shard& metrics;
    limit::store& store;
    // The blocks and overrides in effect (admin API), replaced as a whole by the app when
    // they change; null or empty: none.
    limit::controls_ptr controls;
    identity::hasher hasher;
    limit::offenders refusals;           // who this worker refused lately (GET /top)
    limit::lease_ids lease_ids;          // for the requests that meet a concurrency tier
    access_log::lane* access = nullptr;  // null: access log off
    // Client connections open in every worker, against server.max_connections: one count
    // for all (the kernel spreads connections unevenly, so a per-worker share refuses early).
    // Touched once per connection, never per request.
    std::atomic<std::size_t>& open_connections;
    std::size_t max_connections;
    deadline_sweep connections;
    // The pools of the current snapshot as this worker runs them, in its order. A request
    // holds its lane (shared_ptr): one a reload dropped lives until its last request ends.
    std::vector<std::shared_ptr<upstream::lane>> lanes;
    cap_queues caps;  // the requests waiting for a slot of a pool's max_in_flight, by pool
    boost::asio::ip::tcp::acceptor acceptor{ioc};
    boost::asio::ip::tcp::acceptor tls_acceptor{ioc};    // server.tls.listen; closed without
    boost::asio::ip::tcp::acceptor check_acceptor{ioc};  // service.http_listen; closed without
    std::size_t handshakes = 0;                          // TLS handshakes under way (server.tls.max_handshakes)
    bool draining = false;

    // Starts the deadline sweep; accept() then starts accepting on `acceptor` and, when
    // open, `tls_acceptor` and `check_acceptor` (bound and listening by then), once the store
    // can decide.
    void start();
    void accept();
    // Stops accepting and closes idle connections; calls on_drained (on this thread) once
    // the last connection has closed.
    void begin_drain(std::function<void()> on_drained);
    // Installs a new snapshot; requests already running keep theirs. A pool that stays
    // (the same name) keeps the idle connections of its servers that stay. Worker thread only.
    void set_snapshot(std::shared_ptr<const snapshot> s);
    // The lane of `p`, a pool of the current snapshot (null for one of an older snapshot).
    std::shared_ptr<upstream::lane> lane_of(const upstream::pool* p) const;
    // Renews `l` (held) until it is released: a timer runs while any lease is held.
    void renew_while_held(held_lease& l);
    // Forgets every lease held (their requests are cut short with the loop stopped): before
    // the store goes away, as requests still parked in `ioc` end only when it is destroyed.
    void forget_leases();

private:
    void renew_leases();

    boost::intrusive::list<held_lease, boost::intrusive::constant_time_size<false>> leases_;
    boost::asio::steady_timer lease_timer_{ioc};
    bool renewing_ = false;
};

}  // namespace sluice::server
