#include "limit/deny_cache.hpp"

#include <algorithm>
#include <cstring>

namespace sluice::limit {

namespace {

usec to_usec(deny_cache::clock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); }

template <class T>
void append_raw(std::string& out, const T& v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.append(buf, sizeof(T));
}

}  // namespace

void deny_cache::key_of(const check_request& r) {
    key_.clear();
    append_raw(key_, r.cost);
    for (const auto& k : r.keys) {
        append_raw(key_, static_cast<std::uint16_t>(k.kind));
        key_.append(reinterpret_cast<const char*>(k.id.data()), k.id.size());
        append_raw(key_, static_cast<std::uint32_t>(k.tiers.size()));
        for (const auto& t : k.tiers) append_raw(key_, t.key);
    }
}

std::optional<decision> deny_cache::find(const check_request& r, clock::time_point now) {
    if (map_.empty()) return std::nullopt;
    key_of(r);
    auto it = map_.find(key_);
    if (it == map_.end()) return std::nullopt;
    const entry& e = it->second;
    if (now >= e.until) {
        map_.erase(it);  // its place in order_ goes stale; evict_one() skips it
        return std::nullopt;
    }
    const usec elapsed = to_usec(now - e.given);
    decision d = e.verdict;
    d.retry_after = std::max<usec>(to_usec(e.until - now), 1);
    for (std::size_t i = 0; i < d.tiers.size(); ++i) {
        auto& t = d.tiers[i];
        t.t = &r.keys[t.key_index].tiers[e.tier_pos[i]];
        t.reset = std::max<usec>(t.reset - elapsed, 0);
    }
    return d;
}

void deny_cache::insert(const check_request& r, const decision& d, clock::time_point asked) {
    if (d.allowed || d.retry_after <= 0) return;
    entry e;
    e.verdict = d;
    e.tier_pos.reserve(d.tiers.size());
    for (auto& t : e.verdict.tiers) {
        if (t.key_index >= r.keys.size()) return;
        const auto tiers = r.keys[t.key_index].tiers;
        if (t.t < tiers.data() || t.t >= tiers.data() + tiers.size()) return;
        e.tier_pos.push_back(static_cast<std::size_t>(t.t - tiers.data()));
        t.t = nullptr;  // the request's tiers may be gone by the next hit
    }
    e.given = asked;
    e.until = asked + std::chrono::microseconds(d.retry_after);
    e.seq = ++seq_;

    key_of(r);
    if (!map_.contains(key_))
        while (map_.size() >= max_ && !order_.empty()) evict_one();
    order_.emplace_back(e.seq, key_);
    map_.insert_or_assign(key_, std::move(e));
    if (order_.size() > 2 * max_ + 16) compact_order();
}

void deny_cache::evict_one() {
    auto [seq, key] = std::move(order_.front());
    order_.pop_front();
    auto it = map_.find(key);
    if (it != map_.end() && it->second.seq == seq) map_.erase(it);
}

void deny_cache::compact_order() {
    std::vector<std::pair<std::uint64_t, std::string>> live;
    live.reserve(map_.size());
    for (const auto& [key, e] : map_) live.emplace_back(e.seq, key);
    std::sort(live.begin(), live.end());
    order_.assign(std::make_move_iterator(live.begin()), std::make_move_iterator(live.end()));
}

void deny_cache::clear() {
    map_.clear();
    order_.clear();
}

}  // namespace sluice::limit
