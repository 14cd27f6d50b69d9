// Every metric family Sluice exports, in one place.
//
// Hot-path metrics live in per-worker shards: each cell is written only by its worker
// thread (a relaxed load and store, no read-modify-write, no lock) and read by the
// scraping thread, which sums the shards into prometheus-cpp metric families. Families
// off the hot path (build info, reloads) use prometheus-cpp's own Registry.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::metrics {

enum class upstream_error : std::size_t {
    connect_timeout,
    connect_refused,
    connect_failed,
    tls,
    timeout,
    reset,
    count_
};
const char* to_string(upstream_error e);
// Per server (sluice_upstream_server_errors_total): the upstream_error kinds, then "5xx" (an
// answer passive health counts as a failure).
inline constexpr std::size_t server_error_kinds = static_cast<std::size_t>(upstream_error::count_) + 1;
inline constexpr std::size_t server_error_5xx = server_error_kinds - 1;
const char* server_error_name(std::size_t kind);

enum class decision_result : std::size_t { allowed, limited, shadow_limited, count_ };
const char* to_string(decision_result r);
// Where a decision was asked: the proxy (server.listen, server.tls.listen) or the HTTP check
// (service.http_listen).
enum class listener : std::size_t { proxy, check, count_ };
const char* to_string(listener l);

// How the charge of a request on a route that settles it (routes[].charge, cost_header)
// moved once its outcome was known: it stood, part or all was given back, more was
// charged, or the store failed (the charge then stood).
enum class settlement : std::size_t { charged, refunded, raised, failed, count_ };
const char* to_string(settlement s);

// Why a connection was closed before its PROXY protocol header was read (server.proxy_protocol).
enum class proxy_refusal : std::size_t { untrusted, malformed, timeout, closed, count_ };
const char* to_string(proxy_refusal r);

// How a TLS handshake on the listener ended (refused: over server.tls.max_handshakes), and
// its protocol version.
enum class tls_result : std::size_t { ok, failed, timeout, refused, count_ };
const char* to_string(tls_result r);
enum class tls_version : std::size_t { tls1_2, tls1_3, none, count_ };
const char* to_string(tls_version v);

// How a call of the rate-limit service (src/service) ended: OK split by its overall code,
// else its gRPC status.
enum class rls_call : std::size_t {
    ok,
    over_limit,
    invalid_argument,
    deadline_exceeded,
    cancelled,
    resource_exhausted,
    internal,
    count_
};
const char* to_string(rls_call c);
// What became of one descriptor of a call (unknown: no tiers matched it; allowed, not limited).
// unknown_key, no_plan: a `tiers: plan` descriptor the key registry refused, or whose user has
// no plan the config has (OVER_LIMIT without a limit; OK in shadow mode).
enum class rls_descriptor : std::size_t { allowed, limited, shadow_limited, unknown, unknown_key, no_plan, count_ };
const char* to_string(rls_descriptor d);

// Routes and policies are named by slots handed out by registry::slot(); names beyond
// max_slots share the last slot, labelled "other".
inline constexpr std::size_t max_slots = 128;

// Request duration buckets, in seconds.
inline constexpr std::array<double, 14> duration_buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                         0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
// Store call duration buckets, in seconds.
inline constexpr std::array<double, 12> store_buckets{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
                                                      0.001,   0.0025,   0.005,   0.01,   0.025,   0.05};

// A counter owned by one thread and read by others.
class cell {
public:
    void add(std::uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
    void sub(std::uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) - n, std::memory_order_relaxed); }
    void set(std::uint64_t n) { v_.store(n, std::memory_order_relaxed); }
    std::uint64_t get() const { return v_.load(std::memory_order_relaxed); }

private:
    std::atomic<std::uint64_t> v_{0};
};

template <std::size_t N>
struct histogram_cells {
    std::array<cell, N + 1> counts{};  // last: +Inf
    cell sum_ns;
    void observe(const std::array<double, N>& bounds, double seconds) {
        std::size_t b = 0;
        while (b < N && seconds > bounds[b]) ++b;
        counts[b].add();
        sum_ns.add(static_cast<std::uint64_t>(seconds * 1e9));
    }
};

// One worker's metrics. Mutators: the owning worker thread only. Readers: any thread.
class shard {
public:
    shard() = default;

    void request_done(std::size_t route_slot, unsigned status, double seconds);
    void decided(std::size_t policy_slot, decision_result r, listener l = listener::proxy) {
        decisions_[(static_cast<std::size_t>(l) * max_slots + policy_slot) *
                       static_cast<std::size_t>(decision_result::count_) +
                   static_cast<std::size_t>(r)]
            .add();
    }
    void settled(std::size_t policy_slot, settlement s) {
        settlements_[policy_slot * static_cast<std::size_t>(settlement::count_) + static_cast<std::size_t>(s)].add();
    }
    void store_called(double seconds) { store_duration_.observe(store_buckets, seconds); }
    void store_failed() { store_errors_.add(); }
    void unauthorized() { unauthorized_.add(); }
    void forbidden() { forbidden_.add(); }
    // A request refused because the operator blocked its caller (the admin API), by policy slot.
    void blocked(std::size_t policy_slot) { blocked_[policy_slot].add(); }
    void upstream_failed(upstream_error e) { upstream_errors_[static_cast<std::size_t>(e)].add(); }
    void connection_opened() { open_connections_.add(); }
    void connection_closed() { open_connections_.sub(); }
    void connection_rejected() { rejected_connections_.add(); }
    // Idle upstream connections: the worker has one pool per upstream server.
    void idle_upstream_added() { idle_upstream_.add(); }
    void idle_upstream_removed(std::size_t n = 1) { idle_upstream_.sub(n); }
    // A pool's in-flight cap (max_in_flight), by its slot (registry::slot("upstream", name)):
    // a request answered 503 upstream_busy, or one that waited in the pool's queue.
    void upstream_busy(std::size_t pool_slot) { upstream_busy_[pool_slot].add(); }
    void upstream_queued(std::size_t pool_slot) { upstream_queued_[pool_slot].add(); }
    void lease_held() { leases_held_.add(); }
    void lease_ended() { leases_held_.sub(); }
    void proxy_protocol_refused(proxy_refusal r) { proxy_refused_[static_cast<std::size_t>(r)].add(); }
    // A rate-limit service call ended, `seconds` after gRPC handed it over.
    void rls_called(rls_call c, double seconds) {
        rls_calls_[static_cast<std::size_t>(c)].add();
        rls_duration_.observe(duration_buckets, seconds);
    }
    // A call whose client was gone once the store had charged it: its charge given back
    // (store::take_back), or not (the store failed).
    void rls_taken_back(bool done) { rls_taken_back_[done ? 0 : 1].add(); }
    // One descriptor's result, by its slot (registry::slot("descriptor", "<domain>\t<kind>")).
    void rls_decided(std::size_t descriptor_slot, rls_descriptor r) {
        rls_descriptors_[descriptor_slot * static_cast<std::size_t>(rls_descriptor::count_) +
                         static_cast<std::size_t>(r)]
            .add();
    }
    void tls_handshake(tls_result r, tls_version v) {
        handshakes_[static_cast<std::size_t>(r) * static_cast<std::size_t>(tls_version::count_) +
                    static_cast<std::size_t>(v)]
            .add();
    }

private:
    friend class registry;
    static constexpr std::size_t classes = 5;           // 1xx..5xx
    std::array<cell, max_slots * classes> requests_{};  // route slot * classes + class
    // (listener * max_slots + policy slot) * results + result
    std::array<cell, static_cast<std::size_t>(listener::count_) *
                         max_slots* static_cast<std::size_t>(decision_result::count_)>
        decisions_{};
    std::array<cell, max_slots* static_cast<std::size_t>(settlement::count_)> settlements_{};
    histogram_cells<duration_buckets.size()> duration_;
    histogram_cells<store_buckets.size()> store_duration_;
    cell store_errors_, unauthorized_, forbidden_;
    std::array<cell, static_cast<std::size_t>(upstream_error::count_)> upstream_errors_{};
    cell open_connections_, rejected_connections_, idle_upstream_, leases_held_;
    std::array<cell, max_slots> upstream_busy_{}, upstream_queued_{}, blocked_{};
    std::array<cell, static_cast<std::size_t>(proxy_refusal::count_)> proxy_refused_{};
    std::array<cell, static_cast<std::size_t>(tls_result::count_) * static_cast<std::size_t>(tls_version::count_)>
        handshakes_{};
    std::array<cell, static_cast<std::size_t>(rls_call::count_)> rls_calls_{};
    histogram_cells<duration_buckets.size()> rls_duration_;
    std::array<cell, max_slots* static_cast<std::size_t>(rls_descriptor::count_)> rls_descriptors_{};
    std::array<cell, 2> rls_taken_back_{};  // done, failed
};

// Owns the shards and renders /metrics. Construct once before the workers start.
// A Redis store's counters, one set per worker's store, summed at scrape time.
struct redis_counters {
    cell writes;            // socket writes (each one batch)
    cell commands;          // commands written (commands / writes = batching)
    cell checks;            // checks sent to one node (several per EVALSHA when batched)
    cell deny_cache_hits;   // checks answered 429 by the local deny cache
    cell deny_cache_size;   // entries in the deny cache (a gauge)
    cell timeouts;          // calls that reached their deadline
    cell errors;            // checks answered with an error (any cause, timeouts included)
    cell reconnects;        // connections established after the first
    cell noscript_reloads;  // SCRIPT LOADs sent after a NOSCRIPT reply
    cell connection_lost;   // connections dropped (peer closed, I/O error, stall)
    cell redirects;         // Redis Cluster: MOVED and ASK replies followed
    cell slot_refreshes;    // Redis Cluster: slot maps read (CLUSTER SLOTS)
    cell undos;             // Redis Cluster: commits taken back (another node denied)
};

// A worker's store.on_error local fallback: decisions it made on the local memory store.
struct fallback_counters {
    cell local_decisions;
};

// One upstream pool as the sluice_upstream_* families show it, gathered at scrape time
// (servers come and go with DNS and reloads).
struct upstream_server_figures {
    std::string server;  // its label: the address (after the url's name, when it has one)
    bool up = false;     // neither down (active checks) nor ejected (passive)
    std::uint64_t requests = 0, in_flight = 0, ejections = 0;
    std::array<std::uint64_t, server_error_kinds> errors{};
};
struct upstream_pool_figures {
    std::string upstream;
    std::vector<upstream_server_figures> servers;
    std::array<std::uint64_t, duration_buckets.size() + 1> response{};  // per bucket (last: +Inf), not cumulative
    std::uint64_t response_sum_ns = 0, retries = 0, budget_exhausted = 0;
};

class registry {
public:
    explicit registry(std::size_t workers);
    shard& worker(std::size_t i) { return *shards_[i]; }
    // The slot for a route, policy, pool or descriptor name ("route", "policy", "upstream" or
    // "descriptor": "<domain>\t<descriptor kind>"), the same for the same name
    // across reloads. Any thread (takes a mutex; call when compiling a config, not per request).
    std::size_t slot(std::string_view kind, const std::string& name);
    // Store figures read at scrape time.
    void set_store_gauges(std::function<std::size_t()> keys_held, std::function<std::uint64_t()> evictions);
    // The sluice_redis_* families over every worker's store counters; `connected` counts
    // the workers whose connection is ready. Once, at start.
    void add_redis(std::vector<const redis_counters*> stores, std::function<std::size_t()> connected);
    // sluice_store_degraded (whether `degraded()`) and sluice_store_local_decisions_total over
    // every worker's fallback counters (store.on_error local). Once, at start.
    void add_fallback(std::vector<const fallback_counters*> stores, std::function<bool()> degraded);
    // sluice_limited_identities: distinct identities refused in the last minute (GET /top's
    // count), read at scrape time. Once, at start.
    void add_limited_identities(std::function<std::size_t()> count);
    // sluice_store_kind_evictions_total: identifiers the memory store evicted by their kind's
    // max_values, per kind (its canonical text), read at scrape time. Once, at start.
    void add_kind_evictions(std::function<std::vector<std::pair<std::string, std::uint64_t>>()> by_kind);
    // sluice_access_log_dropped_total: access log lines lost. Once, at start.
    void add_access_log(std::function<std::uint64_t()> dropped);
    // The sluice_upstream_* families of every pool, from `pools()` at each scrape (on the
    // scraping thread). Once, at start.
    void add_upstreams(std::function<std::vector<upstream_pool_figures>()> pools);
    // Counts a configuration reload (SIGHUP or POST /reload) by its result.
    void reloaded(bool ok);
    // sluice_admin_actions_total: an admin API action answered (GET or DELETE
    // /identities/..., a block set or lifted, an override set, ended or listed), by action;
    // sluice_admin_unauthorized_total: an admin request refused 401. The admin's thread.
    void admin_action(std::string_view action);
    void admin_unauthorized();
    // sluice_admin_controls: the blocks and overrides in effect, from `counts()` (blocks,
    // overrides) at each scrape (on the scraping thread). Once, at start.
    void add_controls(std::function<std::pair<std::size_t, std::size_t>()> counts);
    // The certificates the TLS listener serves now: (name, notAfter in Unix seconds), for
    // sluice_tls_certificate_expiry_seconds. At start and at every reload; any thread.
    void set_certificates(std::vector<std::pair<std::string, std::int64_t>> certs);
    // Prometheus text exposition format. Any thread.
    std::string scrape() const;

private:
    std::vector<std::unique_ptr<shard>> shards_;
    mutable std::mutex names_mu_;
    std::vector<std::string> routes_, policies_, upstreams_, descriptors_;
    std::vector<std::pair<std::string, std::int64_t>> certificates_;  // under names_mu_
    std::function<std::size_t()> keys_held_;
    std::function<std::uint64_t()> evictions_;
    std::vector<std::function<std::vector<prometheus::MetricFamily>()>> collectors_;
    std::shared_ptr<prometheus::Registry> extra_;
    prometheus::Family<prometheus::Counter>* reloads_ = nullptr;
    prometheus::Family<prometheus::Counter>* admin_actions_ = nullptr;
    prometheus::Counter* admin_unauthorized_ = nullptr;
};

}  // namespace sluice::metrics
