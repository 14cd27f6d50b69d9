#include "store/memory_store.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace sluice::store {

std::function<limit::usec()> steady_unix_clock() {
    using namespace std::chrono;
    const auto wall0 = duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
    const auto steady0 = steady_clock::now();
    return [wall0, steady0] { return wall0 + duration_cast<microseconds>(steady_clock::now() - steady0).count(); };
}

std::size_t memory_store::map_hash::operator()(const map_key& k) const {
    // The id is already a keyed hash: any 8 of its bytes are uniformly spread.
    std::size_t h;
    std::memcpy(&h, k.id.data(), sizeof h);
    return h ^ static_cast<std::size_t>(k.kind);
}

std::size_t memory_store::stripe_of(const limit::digest& id) {
    return (static_cast<std::size_t>(id[8]) | static_cast<std::size_t>(id[9]) << 8) % stripe_count;
}

memory_store::memory_store(std::size_t max_keys, std::function<limit::usec()> clock)
    : clock_(std::move(clock)),
      max_per_stripe_(std::max<std::size_t>(1, max_keys / stripe_count)),
      stripes_(new stripe[stripe_count]) {}

memory_store::~memory_store() {
    for (std::size_t i = 0; i < stripe_count; ++i) {
        for (auto& [kind, k] : stripes_[i].kinds) k.lru.clear();
        stripes_[i].lru.clear();
    }
}

void memory_store::erase(stripe& s, entry& e) {
    if (e.kind_hook.is_linked()) {
        auto& k = s.kinds[e.key.kind].lru;
        k.erase(k.iterator_to(e));
    }
    s.lru.erase(s.lru.iterator_to(e));
    s.map.erase(e.key);
    s.size.store(s.map.size(), std::memory_order_relaxed);
}

void memory_store::sweep(stripe& s, limit::usec now) {
    for (auto it = s.lru.begin(); it != s.lru.end();) {
        entry& e = *it++;
        if (e.state.expires <= now) erase(s, e);
    }
}

void memory_store::maintain(stripe& s, limit::usec now) {
    // Sweeping a whole stripe once per stripe-size calls keeps the cost per request O(1).
    if (++s.ops >= std::max<std::size_t>(256, s.map.size())) {
        s.ops = 0;
        sweep(s, now);
    }
}

void memory_store::touch(stripe& s, entry& e) {
    s.lru.erase(s.lru.iterator_to(e));
    s.lru.push_back(e);
    if (e.kind_hook.is_linked()) {
        auto& kl = s.kinds[e.key.kind].lru;
        kl.erase(kl.iterator_to(e));
        kl.push_back(e);
    }
}

memory_store::entry& memory_store::find_or_insert(stripe& s, const map_key& k, limit::usec now, bool& inserted,
                                                  std::span<entry* const> in_use, std::uint32_t max_values) {
    const auto used = [&](entry& e) { return std::find(in_use.begin(), in_use.end(), &e) != in_use.end(); };
    auto it = s.map.find(k);
    if (it != s.map.end()) {
        inserted = false;
        entry& e = it->second;
        touch(s, e);
        if (e.state.expires <= now) e.state = {};  // its windows all passed
        return e;
    }
    if (s.map.size() >= max_per_stripe_ && !used(s.lru.front())) {
        erase(s, s.lru.front());
        s.evictions.fetch_add(1, std::memory_order_relaxed);
    }
    inserted = true;
    auto [pos, ok] = s.map.try_emplace(k);
    pos->second.key = k;
    s.lru.push_back(pos->second);
    // Its kind's bound is kept once the request is decided (trim_kind): a refused request
    // keeps nothing of a new value, and must evict no other.
    if (max_values > 0) s.kinds[k.kind].lru.push_back(pos->second);
    s.size.store(s.map.size(), std::memory_order_relaxed);
    return pos->second;
}

void memory_store::trim_kind(stripe& s, identity::kind kind, std::uint32_t max_values, std::span<entry* const> in_use) {
    kind_lru& k = s.kinds[kind];
    const std::size_t per_stripe = (max_values + stripe_count - 1) / stripe_count;
    while (k.lru.size() > per_stripe && std::find(in_use.begin(), in_use.end(), &k.lru.front()) == in_use.end()) {
        erase(s, k.lru.front());
        ++k.evictions;
    }
}

template <class Fn>
void memory_store::locked(const limit::check_request& r, Fn fn) {
    std::array<std::size_t, 8> order{};
    const std::size_t n = std::min(r.keys.size(), order.size());
    for (std::size_t i = 0; i < n; ++i) order[i] = stripe_of(r.keys[i].id);
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n));
    const auto distinct = std::unique(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n)) - order.begin();
    std::array<std::unique_lock<std::mutex>, 8> locks;
    for (std::ptrdiff_t i = 0; i < distinct; ++i)
        locks[static_cast<std::size_t>(i)] = std::unique_lock(stripes_[order[i]].mu);
    const limit::usec now = clock_();
    for (std::ptrdiff_t i = 0; i < distinct; ++i) maintain(stripes_[order[static_cast<std::size_t>(i)]], now);
    fn(now);
}

std::optional<limit::check_result> memory_store::try_check(const limit::check_request& r) {
    if (r.query) return query_now(r);
    limit::check_result out;
    locked(r, [&](limit::usec now) {
        const std::size_t n = std::min<std::size_t>(r.keys.size(), 8);
        std::array<limit::key_request, 8> reqs;
        std::array<entry*, 8> entries{};
        std::array<bool, 8> inserted{};
        for (std::size_t i = 0; i < n; ++i) {
            auto& s = stripes_[stripe_of(r.keys[i].id)];
            entries[i] = &find_or_insert(s, {r.keys[i].id, r.keys[i].kind}, now, inserted[i],
                                         std::span(entries.data(), i), r.keys[i].max_values);
            reqs[i] = {&entries[i]->state, r.keys[i].tiers};
        }
        out.verdict = limit::decide(std::span(reqs.data(), n), now, r.cost, r.count_rejected, r.lease,
                                    r.want_receipt ? &out.taken : nullptr);
        // A key created for a request that was then denied holds nothing: drop it again. One
        // kept makes room within its kind's bound.
        for (std::size_t i = 0; i < n; ++i) {
            if (!inserted[i]) continue;
            auto& s = stripes_[stripe_of(r.keys[i].id)];
            if (entries[i]->state.tiers.empty()) {
                erase(s, *entries[i]);
                entries[i] = nullptr;
            }
        }
        for (std::size_t i = 0; i < n; ++i)
            if (inserted[i] && entries[i] != nullptr && r.keys[i].max_values > 0)
                trim_kind(stripes_[stripe_of(r.keys[i].id)], r.keys[i].kind, r.keys[i].max_values,
                          std::span(entries.data(), n));
    });
    return out;
}

void memory_store::change_lease(const limit::check_request& r, limit::lease_change c) {
    locked(r, [&](limit::usec now) {
        std::array<limit::key_request, 8> reqs;
        std::size_t n = 0;
        for (std::size_t i = 0; i < r.keys.size() && n < reqs.size(); ++i) {
            auto& s = stripes_[stripe_of(r.keys[i].id)];
            auto it = s.map.find({r.keys[i].id, r.keys[i].kind});
            if (it == s.map.end()) continue;
            // A renewal is a use: an identifier with requests in flight is not the least recent
            // (of the stripe, nor of its kind).
            touch(s, it->second);
            reqs[n++] = {&it->second.state, r.keys[i].tiers};
        }
        if (c == limit::lease_change::release) {
            limit::release_lease(std::span(reqs.data(), n), r.lease);
        } else {
            limit::renew_lease(std::span(reqs.data(), n), now, r.lease);
        }
    });
}

boost::asio::awaitable<limit::check_result> memory_store::check(limit::check_request r) { co_return *try_check(r); }

limit::check_result memory_store::query_now(const limit::check_request& r) {
    limit::check_result out;
    locked(r, [&](limit::usec now) {
        const std::size_t n = std::min<std::size_t>(r.keys.size(), 8);
        std::array<limit::key_state, 8> copies;
        std::array<limit::key_request, 8> reqs;
        for (std::size_t i = 0; i < n; ++i) {
            const auto& s = stripes_[stripe_of(r.keys[i].id)];
            const auto it = s.map.find({r.keys[i].id, r.keys[i].kind});
            if (it != s.map.end() && it->second.state.expires > now) copies[i] = it->second.state;
            reqs[i] = {&copies[i], r.keys[i].tiers};
        }
        out.verdict = limit::decide(std::span(reqs.data(), n), now, r.cost, false, r.lease);
    });
    return out;
}

void memory_store::reset_now(const limit::check_request& r) {
    locked(r, [&](limit::usec) {
        for (const auto& k : r.keys) {
            auto& s = stripes_[stripe_of(k.id)];
            const auto it = s.map.find({k.id, k.kind});
            if (it == s.map.end()) continue;
            auto& tiers = it->second.state.tiers;
            std::erase_if(tiers, [&](const limit::tier_state& ts) {
                return std::any_of(k.tiers.begin(), k.tiers.end(),
                                   [&](const limit::tier& t) { return t.key == ts.key; });
            });
            if (tiers.empty()) erase(s, it->second);
        }
    });
}

boost::asio::awaitable<bool> memory_store::reset(limit::check_request r) {
    reset_now(r);
    const bool done = true;
    co_return done;
}

bool memory_store::take_back_now(const limit::check_request& r, const limit::receipt& rc, std::int64_t amount) {
    if (amount < 1) return false;
    amount = std::min(amount, r.cost);  // never what other admissions added
    locked(r, [&](limit::usec now) {
        const std::size_t n = std::min<std::size_t>(r.keys.size(), 8);
        std::array<limit::key_request, 8> reqs;
        std::array<limit::key_state, 8> gone;  // an identifier no longer held: nothing to take back
        for (std::size_t i = 0; i < n; ++i) {
            auto& s = stripes_[stripe_of(r.keys[i].id)];
            auto it = s.map.find({r.keys[i].id, r.keys[i].kind});
            reqs[i] = {it == s.map.end() ? &gone[i] : &it->second.state, r.keys[i].tiers};
        }
        limit::take_back(std::span(reqs.data(), n), now, amount, rc, amount >= r.cost);
    });
    return true;
}

boost::asio::awaitable<bool> memory_store::take_back(limit::check_request r, limit::receipt rc, std::int64_t amount) {
    const bool done = take_back_now(r, rc, amount);
    co_return done;
}

void memory_store::collect_expired() {
    for (std::size_t i = 0; i < stripe_count; ++i) {
        std::lock_guard lock(stripes_[i].mu);
        sweep(stripes_[i], clock_());
    }
}

std::size_t memory_store::keys_held() const {
    std::size_t total = 0;
    for (std::size_t i = 0; i < stripe_count; ++i) total += stripes_[i].size.load(std::memory_order_relaxed);
    return total;
}

std::vector<std::pair<identity::kind, std::uint64_t>> memory_store::kind_evictions() const {
    std::vector<std::pair<identity::kind, std::uint64_t>> out;
    for (std::size_t i = 0; i < stripe_count; ++i) {
        std::lock_guard lock(stripes_[i].mu);
        for (const auto& entry : stripes_[i].kinds) {
            const identity::kind kind = entry.first;
            auto at = std::find_if(out.begin(), out.end(), [kind](const auto& o) { return o.first == kind; });
            if (at == out.end()) at = out.insert(out.end(), {kind, 0});
            at->second += entry.second.evictions;
        }
    }
    return out;
}

std::uint64_t memory_store::evictions() const {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < stripe_count; ++i) total += stripes_[i].evictions.load(std::memory_order_relaxed);
    return total;
}

}  // namespace sluice::store
