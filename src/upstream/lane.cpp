#include "upstream/lane.hpp"

#include <algorithm>

namespace sluice::upstream {

lane::lane(std::shared_ptr<pool> p, const boost::asio::any_io_executor& ex, metrics::shard& m, const lane* before)
    : pool_(std::move(p)), ex_(ex), metrics_(m) {
    if (before) {
        slots_ = before->slots_;
        budget_ = before->budget_;
    }
    pool_->counts().attach(&counters_);
    refresh();
}

lane::~lane() { pool_->counts().detach(&counters_); }

void lane::refresh() {
    const auto v = pool_->version();
    if (v == version_ && members_) return;
    version_ = v;
    members_ = pool_->current();
    std::vector<std::shared_ptr<slot>> next;
    for (const auto& s : members_->servers) {
        auto it = std::find_if(slots_.begin(), slots_.end(), [&](const auto& sl) { return sl->srv == s; });
        if (it != slots_.end())
            next.push_back(*it);
        else
            next.push_back(std::make_shared<slot>(s, ex_, closed_ ? 0 : pool_->cfg().max_idle_per_worker, metrics_));
    }
    slots_ = std::move(next);
}

std::shared_ptr<slot> lane::pick(std::uint64_t hash, std::span<const slot* const> tried) {
    refresh();
    const auto now = ticks(clock::now());
    const auto& cfg = pool_->cfg();
    weights_.clear();
    for (const auto& s : slots_) {
        const bool skip = std::find(tried.begin(), tried.end(), s.get()) != tried.end();
        weights_.push_back(skip ? 0 : s->srv->effective_weight(now, cfg.slow_start));
    }
    std::size_t i = none;
    switch (cfg.balance) {
        case config::balance_kind::round_robin: i = rr_.pick(weights_); break;
        case config::balance_kind::least_request:
            in_flight_.clear();
            for (const auto& s : slots_) in_flight_.push_back(s->in_flight);
            i = least_request(weights_, in_flight_, random_());
            break;
        case config::balance_kind::hash: i = members_->ring.pick(hash, weights_); break;
    }
    return i == none ? nullptr : slots_[i];
}

lane::second& lane::bucket(clock::time_point now) {
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    auto& b = budget_[static_cast<std::size_t>(s) % budget_.size()];
    if (b.at != s) b = {s, 0, 0};
    return b;
}

void lane::count_request(clock::time_point now) { ++bucket(now).requests; }

bool lane::take_retry(clock::time_point now) {
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    std::uint64_t requests = 0, retries = 0;
    for (const auto& b : budget_)
        if (b.at > s - static_cast<std::int64_t>(budget_.size())) {
            requests += b.requests;
            retries += b.retries;
        }
    if (retries >= 3 + requests * pool_->cfg().retry_budget_percent / 100) return false;
    ++bucket(now).retries;
    return true;
}

void lane::close_all() {
    closed_ = true;
    for (auto& s : slots_) s->idle.close_all();
}

}  // namespace sluice::upstream
