// A pool of upstream servers (config `upstreams.<name>`, or the `upstream:` block), as the
// gateway runs it.
//
// `server` is one address one of the pool's urls resolved to. Its health is the gateway's,
// shared by every worker: written rarely (an active check's verdict, a passive ejection),
// read at each pick, one atomic per item.
//
// `pool` holds the pool's config and its current `members` (the servers as last resolved:
// immutable, replaced whole when DNS gives other addresses; a server whose address stays
// keeps its object, so its health and its workers' idle connections stay too). Workers copy
// `members` when `version()` moves, so the hot path reads no shared pointer.
//
// Counters for /upstreams and the sluice_upstream_* metrics: each worker writes cells of
// its own (a `slot_counters` per server in each of its lanes' slots, a `lane_counters` per
// lane), relaxed, no lock per request. The admin thread never walks the workers' lanes (a
// worker replaces them at a reload): a slot attaches its cells to its server's `tally` when
// it is made and detaches them when it goes, folding what they counted into the tally's
// `retired` sums; a lane does the same with its pool's. A tally's mutex is taken once per
// slot or lane made or gone and once per read, never per request; a reader holds it while
// it reads the attached cells, so none goes away under it.
//
// Thread: `pool` and `server` are shared by every worker, the health checker and the
// resolver; every member is either immutable after publication, atomic, or (a tally)
// behind its own mutex.
#pragma once

#include "config/config.hpp"
#include "metrics/metrics.hpp"
#include "upstream/balancer.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::upstream {

using clock = std::chrono::steady_clock;

// Nanoseconds of clock, as the atomics hold them.
inline std::int64_t ticks(clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Sums of counters written by workers (see the top of this file). `add(Totals&, const
// Cells&)` is found by argument-dependent lookup.
template <class Cells, class Totals>
class tally {
public:
    void attach(const Cells* c) {
        std::lock_guard lock(mutex_);
        live_.push_back(c);
    }
    void detach(const Cells* c) {
        std::lock_guard lock(mutex_);
        add(retired_, *c);
        live_.erase(std::remove(live_.begin(), live_.end(), c), live_.end());
    }
    Totals sum() const {
        std::lock_guard lock(mutex_);
        Totals t = retired_;
        for (const auto* c : live_) add(t, *c);
        return t;
    }

private:
    mutable std::mutex mutex_;
    std::vector<const Cells*> live_;
    Totals retired_{};
};

// What one worker counted for one server, in one slot.
struct slot_counters {
    metrics::cell requests;   // attempts sent to it
    metrics::cell failures;   // what passive health counts: connect errors, resets, timeouts, 5xx
    metrics::cell in_flight;  // a gauge
    std::array<metrics::cell, metrics::server_error_kinds> errors{};  // by kind (a response cut short too)
};
struct server_totals {
    std::uint64_t requests = 0, failures = 0, in_flight = 0;
    std::array<std::uint64_t, metrics::server_error_kinds> errors{};
};
void add(server_totals& t, const slot_counters& c);

// What one worker counted for one pool, in one lane.
struct lane_counters {
    // From the request sent to the final response head.
    metrics::histogram_cells<metrics::duration_buckets.size()> response;
    metrics::cell retries;           // attempts sent to another server after a failure
    metrics::cell budget_exhausted;  // retries the retry budget refused
};
struct pool_totals {
    std::array<std::uint64_t, metrics::duration_buckets.size() + 1> response{};  // per bucket, not cumulative
    std::uint64_t response_sum_ns = 0, retries = 0, budget_exhausted = 0;
};
void add(pool_totals& t, const lane_counters& c);

struct server {
    server(const config::upstream_server_config& c, const boost::asio::ip::tcp::endpoint& ep);

    const config::upstream_url url;  // as configured: the Host, SNI and the name verified
    const unsigned weight;
    const boost::asio::ip::tcp::endpoint endpoint;
    const std::string address;  // "127.0.0.1:9001", "[::1]:9001"
    // What /upstreams, metrics and logs call it: the address, after the url's authority
    // when that is a name ("api.internal:8080 10.0.0.7:8080").
    const std::string label;

    // Active checks: down after `unhealthy` failures in a row, until `healthy` passes.
    std::atomic<bool> checked_down{false};
    // Passive: ejected until this tick (0: never ejected).
    std::atomic<std::int64_t> ejected_until{0};
    std::atomic<std::uint32_t> failures{0};          // connect errors or 5xx in a row
    std::atomic<std::uint32_t> ejections_in_row{0};  // doubles eject_for; reset by a success after a return
    std::atomic<std::uint64_t> ejections{0};         // ever
    // When it last came back (from down or ejected), for slow start; 0: never went.
    std::atomic<std::int64_t> back_at{0};
    // Every worker's slot_counters for it (kept with the server across reloads).
    tally<slot_counters, server_totals> counts;

    // Active checks, written by the health checker only (upstream/health.hpp, on the main
    // io_context), read by anyone (/upstreams, metrics). A pass resets the failures and a
    // failure the passes.
    std::atomic<std::uint32_t> check_passes{0};    // consecutive passed checks
    std::atomic<std::uint32_t> check_failures{0};  // consecutive failed checks
    std::atomic<std::int64_t> last_check_ms{0};    // when the last check ended, unix ms; 0: never checked
    // The last check's result: "ok", or why it failed ("status 503", "connect refused",
    // "timeout", "tls handshake failed: ..."); "" before the first.
    std::string last_check() const;
    void set_last_check(std::string result);

    // Neither down nor ejected at `now`.
    bool available(std::int64_t now) const {
        return !checked_down.load(std::memory_order_relaxed) && ejected_until.load(std::memory_order_relaxed) <= now;
    }
    // The weight a balancer gives it at `now`, scaled by 100 (so that slow start can ramp
    // from 10% to 100% in steps): 0 when not available.
    unsigned effective_weight(std::int64_t now, config::duration slow_start) const;

private:
    mutable std::mutex check_mutex_;  // guards last_check_
    std::string last_check_;
};

struct members {
    std::vector<std::shared_ptr<server>> servers;
    hash_ring ring;  // keyed by address: balance hash
};

class pool {
public:
    // `cfg` is owned by the config snapshot that `keep` holds.
    pool(std::shared_ptr<const config::config> keep, const config::upstream_config& cfg);

    const config::upstream_config& cfg() const { return *cfg_; }
    const std::string& name() const { return cfg_->name; }

    std::shared_ptr<const members> current() const;
    std::uint64_t version() const { return version_.load(std::memory_order_acquire); }
    // Replaces the members (the resolver; the registry at a reload).
    void publish(std::shared_ptr<const members> m);

    // Passive health, from any worker: a connect failure or a 5xx from `s`, or a success.
    // Returns true when this failure ejected it (to be logged once, by the caller).
    bool failed(server& s, clock::time_point now);
    void succeeded(server& s);

    // The pool of the same name in the config before a reload: its servers whose url,
    // weight and address are unchanged are taken over, health and all.
    std::shared_ptr<server> take_over(const config::upstream_server_config& c,
                                      const boost::asio::ip::tcp::endpoint& ep) const;

    // Every worker's lane_counters for the pool, shared with the pool of the same name before
    // a reload (carry_counts, before this one is published), so that its sums go on.
    tally<lane_counters, pool_totals>& counts() const { return *counts_; }
    void carry_counts(const pool& before) { counts_ = before.counts_; }

private:
    std::shared_ptr<const config::config> keep_;
    const config::upstream_config* cfg_;
    mutable std::mutex mutex_;  // guards members_ (publish, current: never per request)
    std::mutex eject_mutex_;    // one passive ejection at a time (failed())
    std::shared_ptr<const members> members_;
    std::atomic<std::uint64_t> version_{0};
    std::shared_ptr<tally<lane_counters, pool_totals>> counts_;
};

// "127.0.0.1:9001", "[::1]:9001".
std::string address_text(const boost::asio::ip::tcp::endpoint& ep);

// Builds members from resolved servers (their ring too).
std::shared_ptr<const members> make_members(std::vector<std::shared_ptr<server>> servers);

}  // namespace sluice::upstream
