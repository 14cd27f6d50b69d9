// Every metric family Sluice exports, in one place.
//
// Hot-path metrics live in per-worker shards: each cell is written only by its worker
// thread (a relaxed load and store, no read-modify-write, no lock) and read by the
// scraping thread, which sums the shards into prometheus-cpp metric families. Families
// off the hot path (build info, reloads) use prometheus-cpp's own Registry.
#pragma once

#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::metrics {

enum class upstream_error : std::size_t { connect_timeout, connect_refused, connect_failed, timeout, reset, count_ };
const char* to_string(upstream_error e);

// Request duration buckets, in seconds.
inline constexpr std::array<double, 14> duration_buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                         0.1,    0.25,  0.5,    1.0,   2.5,   5.0,  10.0};

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

// One worker's metrics. Mutators: the owning worker thread only. Readers: any thread.
class shard {
public:
    explicit shard(std::size_t routes);

    void request_done(std::size_t route, unsigned status, double seconds);
    void upstream_failed(upstream_error e) { upstream_errors_[static_cast<std::size_t>(e)].add(); }
    void connection_opened() { open_connections_.add(); }
    void connection_closed() { open_connections_.sub(); }
    void connection_rejected() { rejected_connections_.add(); }
    void set_idle_upstream(std::size_t n) { idle_upstream_.set(n); }

private:
    friend class registry;
    static constexpr std::size_t classes = 5;  // 1xx..5xx
    std::vector<cell> requests_;               // route * classes + class
    std::array<cell, duration_buckets.size() + 1> duration_counts_{};  // last: +Inf
    cell duration_sum_us_;
    std::array<cell, static_cast<std::size_t>(upstream_error::count_)> upstream_errors_{};
    cell open_connections_, rejected_connections_, idle_upstream_;
};

// Owns the shards and renders /metrics. Construct once before the workers start.
class registry {
public:
    registry(std::size_t workers, std::vector<std::string> route_names);
    shard& worker(std::size_t i) { return *shards_[i]; }
    prometheus::Registry& extra() { return *extra_; }
    // Prometheus text exposition format. Any thread.
    std::string scrape() const;

private:
    std::vector<std::unique_ptr<shard>> shards_;
    std::vector<std::string> routes_;
    std::shared_ptr<prometheus::Registry> extra_;
};

}  // namespace sluice::metrics
