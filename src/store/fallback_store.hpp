// store.on_error local: the shared store while it answers; while it does not, this
// gateway's memory store with every limit divided by store.fleet_size, rounded up
// (docs/design.md, "Limits and the data model").
//
// Contract:
//  - try_check() and check() give the shared store's answer when it has one. When it
//    answers an error (not connected, timed out, failed), the request is decided on the
//    local memory store over the divided tiers (limit::tier::divided()). An error only when
//    memory runs out (the caller then fails open).
//  - A worker is degraded from its first local decision to the first answer the shared
//    store gives it a second or more after its last failure. The gateway's change (no worker degraded <-> some worker
//    degraded) is logged once each way, by the shared fallback_state.
//  - The local state is kept after the shared store is back and expires as its windows
//    pass: a second outage inside a window resumes the counts of the first.
//  - Divided tiers are built once per tier list and kept until on_reload().
//  - A query (check_request::query) is the shared store's answer, or the local store's when
//    the shared one fails; it never turns a worker degraded.
//
// Thread: one fallback_store per worker, used on that worker's thread like the shared store
// it wraps; degraded() from any thread. The memory store and the fallback_state are shared
// by every worker's fallback_store.
#pragma once

#include "limit/store.hpp"
#include "metrics/metrics.hpp"
#include "store/memory_store.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace sluice::store {

// What the workers' fallback stores share: the fleet size and how many of them are degraded.
class fallback_state {
public:
    explicit fallback_state(std::int64_t fleet_size) : fleet_size_(fleet_size) {}
    std::int64_t fleet_size() const { return fleet_size_; }
    bool degraded() const { return degraded_workers_.load(std::memory_order_relaxed) > 0; }
    // A worker turned degraded (with the shared store's error) or back. Logs the gateway's change.
    void entered(const std::string& why);
    void left();

private:
    std::int64_t fleet_size_;
    std::atomic<std::size_t> degraded_workers_{0};
};

class fallback_store final : public limit::store {
public:
    // `recovery_quiet`: how long after its last failure an answer of the shared store ends
    // the degraded state.
    fallback_store(limit::store& shared, memory_store& local, fallback_state& state,
                   std::chrono::steady_clock::duration recovery_quiet = std::chrono::seconds(1));

    std::optional<limit::check_result> try_check(const limit::check_request& r) override;
    boost::asio::awaitable<limit::check_result> check(limit::check_request r) override;
    // To both stores: whichever admitted holds the lease (a tier's key is the same divided).
    void change_lease(const limit::check_request& r, limit::lease_change c) override {
        shared_.change_lease(r, c);
        local_.change_lease(r, c);
    }
    // To the store that admitted (receipt::local): the local one over the same divided tiers.
    boost::asio::awaitable<bool> take_back(limit::check_request r, limit::receipt rc, std::int64_t amount) override;
    // Both stores: the local one holds what this gateway decided while degraded. The
    // shared store's answer.
    boost::asio::awaitable<bool> reset(limit::check_request r) override;
    std::size_t keys_held() const override { return shared_.keys_held(); }
    void on_reload() override;
    // The shared store's readiness: with it not ready this store still answers, locally.
    bool ready() const override { return shared_.ready(); }
    void stop() override { shared_.stop(); }

    // Whether this worker decides locally now. Any thread.
    bool degraded() const { return degraded_.load(std::memory_order_relaxed); }
    const metrics::fallback_counters& counters() const { return counters_; }

private:
    limit::check_result decide_locally(const limit::check_request& r, const std::string& why);
    // A query the shared store could not answer, on the local store (not a local decision:
    // the worker does not turn degraded).
    limit::check_result query_locally(const limit::check_request& r);
    std::span<const limit::tier> divided(std::span<const limit::tier> tiers);
    // r's keys over divided tiers (in keys_: valid until the next call).
    std::span<const limit::store_key> local_keys(const limit::check_request& r);
    void answered();

    limit::store& shared_;
    memory_store& local_;
    fallback_state& state_;
    std::chrono::steady_clock::duration recovery_quiet_;
    std::atomic<bool> degraded_{false};
    std::chrono::steady_clock::time_point last_error_{};  // the last local decision's
    metrics::fallback_counters counters_;
    // Divided copies of the tier lists seen since the last reload, by the list's address.
    std::unordered_map<const limit::tier*, std::vector<limit::tier>> divided_;
    std::vector<limit::store_key> keys_;  // the request's keys over divided tiers (reused)
};

}  // namespace sluice::store
