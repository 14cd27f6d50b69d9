#include "server/lease.hpp"

#include "server/snapshot.hpp"

#include <algorithm>

namespace sluice::server {

void held_lease::hold(limit::store& st, metrics::shard& m, std::shared_ptr<const snapshot> snap,
                      const limit::check_request& r, http::clock::time_point now) {
    release();
    store_ = &st;
    metrics_ = &m;
    m.lease_held();
    snap_ = std::move(snap);
    const std::size_t n = std::min(r.keys.size(), keys_.size());
    std::copy_n(r.keys.begin(), n, keys_.begin());
    r_ = {std::span(keys_.data(), n), r.cost, r.count_rejected, r.lease};
    limit::usec shortest = 0;
    for (const auto& k : r_.keys) {
        for (const auto& t : k.tiers) {
            if (t.algo == config::algorithm::concurrency && (shortest == 0 || t.per < shortest)) shortest = t.per;
        }
    }
    every_ = std::chrono::microseconds(shortest / 3);
    due_ = now + every_;
}

void held_lease::release() {
    if (!held()) return;
    store_->change_lease(r_, limit::lease_change::release);
    forget();
}

void held_lease::forget() {
    if (!held()) return;
    metrics_->lease_ended();
    unlink();
    r_ = {};
    snap_.reset();
}

void held_lease::renew_if_due(http::clock::time_point now) {
    if (!held() || now < due_) return;
    store_->change_lease(r_, limit::lease_change::renew);
    due_ = now + every_;
}

}  // namespace sluice::server
