#include "store/fallback_store.hpp"

#include <spdlog/spdlog.h>

namespace sluice::store {

void fallback_state::entered(const std::string& why) {
    if (degraded_workers_.fetch_add(1, std::memory_order_relaxed) == 0)
        spdlog::warn(
            "store degraded: the shared store does not answer ({}); deciding on this gateway's memory store with "
            "limits divided by store.fleet_size {}",
            why, fleet_size_);
}

void fallback_state::left() {
    if (degraded_workers_.fetch_sub(1, std::memory_order_relaxed) == 1)
        spdlog::warn("store recovered: the shared store answers again; deciding on it");
}

fallback_store::fallback_store(limit::store& shared, memory_store& local, fallback_state& state,
                               std::chrono::steady_clock::duration recovery_quiet)
    : shared_(shared), local_(local), state_(state), recovery_quiet_(recovery_quiet) {}

void fallback_store::on_reload() {
    divided_.clear();
    shared_.on_reload();
}

std::span<const limit::tier> fallback_store::divided(std::span<const limit::tier> tiers) {
    if (tiers.empty() || state_.fleet_size() <= 1) return tiers;
    // A list freed with its snapshot cannot be mistaken for a new one at the same address:
    // on_reload() clears the cache before a new snapshot's first request.
    auto& copy = divided_[tiers.data()];
    if (copy.size() != tiers.size() || copy.front().key != tiers.front().key) {
        copy.clear();
        for (const auto& t : tiers) copy.push_back(t.divided(state_.fleet_size()));
    }
    return copy;
}

limit::check_result fallback_store::decide_locally(const limit::check_request& r, const std::string& why) {
    last_error_ = std::chrono::steady_clock::now();
    if (!degraded_.exchange(true, std::memory_order_relaxed)) state_.entered(why);
    counters_.local_decisions.add();
    try {
        limit::check_request local = r;
        local.keys = local_keys(r);
        auto out = *local_.try_check(local);
        out.taken.local = true;
        return out;
    } catch (const std::exception&) {
        limit::check_result out;  // then store.on_error local fails open, as allow does
        out.state = limit::check_result::status::error;
        out.error = "out of memory";
        return out;
    }
}

std::span<const limit::store_key> fallback_store::local_keys(const limit::check_request& r) {
    keys_.assign(r.keys.begin(), r.keys.end());
    for (auto& k : keys_) k.tiers = divided(k.tiers);
    return keys_;
}

boost::asio::awaitable<bool> fallback_store::take_back(limit::check_request r, limit::receipt rc, std::int64_t amount) {
    if (!rc.local) {
        const bool done = co_await shared_.take_back(r, rc, amount);
        co_return done;
    }
    try {
        limit::check_request local = r;
        local.keys = local_keys(r);
        if (!local_.take_back_now(local, rc, amount)) co_return false;
    } catch (const std::exception&) {
        co_return false;
    }
    co_return true;
}

void fallback_store::answered() {
    // Back only after a quiet second: a store failing now and then (one cluster node down,
    // a timeout here and there) must not flip the state, and its log lines, per request.
    if (!degraded_.load(std::memory_order_relaxed) || std::chrono::steady_clock::now() - last_error_ < recovery_quiet_)
        return;
    if (degraded_.exchange(false, std::memory_order_relaxed)) state_.left();
}

limit::check_result fallback_store::query_locally(const limit::check_request& r) {
    try {
        std::vector<limit::store_key> keys(r.keys.begin(), r.keys.end());
        for (auto& k : keys) k.tiers = divided(k.tiers);
        limit::check_request local = r;
        local.keys = keys;
        return *local_.try_check(local);
    } catch (const std::exception&) {
        limit::check_result out;
        out.state = limit::check_result::status::error;
        out.error = "out of memory";
        return out;
    }
}

boost::asio::awaitable<bool> fallback_store::reset(limit::check_request r) {
    local_.reset_now(r);  // divided tiers keep their keys
    const bool done = co_await shared_.reset(r);
    co_return done;
}

std::optional<limit::check_result> fallback_store::try_check(const limit::check_request& r) {
    if (r.query) {
        auto result = shared_.try_check(r);
        if (result && result->state == limit::check_result::status::error) return query_locally(r);
        return result;
    }
    auto result = shared_.try_check(r);
    // An answer at once that is not an error is the deny cache's: it says nothing of the
    // shared store's health.
    if (result && result->state == limit::check_result::status::error) return decide_locally(r, result->error);
    return result;
}

boost::asio::awaitable<limit::check_result> fallback_store::check(limit::check_request r) {
    auto result = co_await shared_.check(r);
    if (r.query) {
        if (result.state == limit::check_result::status::error) co_return query_locally(r);
        co_return result;
    }
    if (result.state == limit::check_result::status::error) co_return decide_locally(r, result.error);
    answered();
    co_return result;
}

}  // namespace sluice::store
