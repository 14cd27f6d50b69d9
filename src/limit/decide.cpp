#include "limit/decide.hpp"

#include <algorithm>
#include <chrono>

namespace sluice::limit {

namespace {

constexpr usec us_per_ms = 1000;

usec floor_div(usec a, usec b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The outcome of checking one tier at `now` for `cost`, before anything is written.
struct check {
    bool ok = true;
    usec admit_at = 0;           // when !ok: the earliest instant this tier admits the request
    std::int64_t remaining = 0;  // if admitted (else: as it stands)
    usec reset = 0;
};

// The index of the bucket holding `now`.
std::int64_t bucket_of(const tier& t, usec now) {
    return t.month ? month_of(now + t.offset) : floor_div(now + t.offset, t.bucket);
}

// When the bucket with index i leaves the window.
usec leaves_at(const tier& t, std::int64_t index) {
    return (t.month ? month_start(index + 1) : (index + t.buckets) * t.bucket) - t.offset;
}

// fixed and sliding: buckets of `bucket` µs (or calendar months); the window at t is the
// bucket holding t and the buckets-1 before it.
check check_buckets(const tier& t, const tier_state& s, usec now, std::int64_t cost) {
    const std::int64_t current = bucket_of(t, now);
    const std::int64_t oldest = current - t.buckets + 1;
    std::int64_t count = 0;
    std::int64_t first_live = -1;  // index into data of the oldest live bucket
    for (std::size_t i = 0; i < s.data.size(); i += 2) {
        if (s.data[i] < oldest || s.data[i + 1] == 0) continue;  // (a count of 0 is no bucket)
        if (first_live < 0) first_live = static_cast<std::int64_t>(i);
        count += s.data[i + 1];
    }
    check c;
    c.ok = count + cost <= t.limit;
    c.remaining = t.limit - count - (c.ok ? cost : 0);
    auto leaves = [&](std::int64_t index) { return leaves_at(t, index) - now; };
    if (c.ok) {
        c.reset = first_live >= 0 ? leaves(s.data[static_cast<std::size_t>(first_live)])
                  : cost > 0      ? leaves(current)
                                  : 0;
        return c;
    }
    // A cost above the limit never fits (config forbids it; stay defined regardless).
    c.admit_at = now + t.horizon;
    if (first_live < 0) return c;
    // Drop buckets oldest first until the request fits; it is admitted once the last
    // dropped bucket has left the window.
    std::int64_t freed = 0;
    for (std::size_t i = static_cast<std::size_t>(first_live); i < s.data.size(); i += 2) {
        freed += s.data[i + 1];
        if (count - freed + cost <= t.limit) {
            c.admit_at = leaves_at(t, s.data[i]);
            break;
        }
    }
    c.reset = leaves(s.data[static_cast<std::size_t>(first_live)]);
    return c;
}

void commit_buckets(const tier& t, tier_state& s, usec now, std::int64_t cost) {
    const std::int64_t current = bucket_of(t, now);
    const std::int64_t oldest = current - t.buckets + 1;
    std::size_t drop = 0;
    while (drop < s.data.size() && s.data[drop] < oldest) drop += 2;
    s.data.erase(s.data.begin(), s.data.begin() + static_cast<std::ptrdiff_t>(drop));
    if (!s.data.empty() && s.data[s.data.size() - 2] == current) {
        s.data.back() += cost;
    } else if (cost > 0) {
        s.data.push_back(current);
        s.data.push_back(cost);
    }
}

// gcra: one theoretical arrival time; a request of cost c is admitted when
// max(tat, now) + c*T - burst*T <= now.
check check_gcra(const tier& t, const tier_state& s, usec now, std::int64_t cost) {
    const usec tat = s.data.empty() ? now : std::max(s.data[0], now);
    const usec next = tat + cost * t.interval;
    check c;
    c.ok = next - now <= t.tolerance;
    if (!c.ok) c.admit_at = next - t.tolerance;
    const usec debt = (c.ok ? next : tat) - now;  // how far the bucket is from full
    c.remaining = (t.tolerance - debt) / t.interval;
    // One more unit comes back once the debt falls to tolerance - (remaining + 1) * T.
    c.reset = debt <= 0 ? 0 : debt - t.tolerance + (c.remaining + 1) * t.interval;
    return c;
}

void commit_gcra(const tier& t, tier_state& s, usec now, std::int64_t cost) {
    const usec tat = s.data.empty() ? now : std::max(s.data[0], now);
    s.data.assign(1, tat + cost * t.interval);
}

// log: an entry counts while now < ts + per.
check check_log(const tier& t, const tier_state& s, usec now, std::int64_t cost) {
    auto live = std::upper_bound(s.data.begin(), s.data.end(), now - t.per);
    const std::int64_t count = s.data.end() - live;
    check c;
    c.ok = count + cost <= t.limit;
    c.remaining = t.limit - count - (c.ok ? cost : 0);
    if (!c.ok) c.admit_at = cost > t.limit ? now + t.horizon : *(live + (count + cost - t.limit - 1)) + t.per;
    c.reset = live != s.data.end() ? *live + t.per - now : cost > 0 ? t.per : 0;
    return c;
}

void commit_log(const tier& t, tier_state& s, usec now, std::int64_t cost) {
    auto live = std::upper_bound(s.data.begin(), s.data.end(), now - t.per);
    s.data.erase(s.data.begin(), live);
    s.data.insert(s.data.end(), static_cast<std::size_t>(cost), now);
}

// concurrency: a lease counts while now < its expiry. When a slot frees is unknown: admit_at
// stays 0, before any now, so retry_after takes nothing from it (decision::retry_unknown tells).
std::int64_t live_leases(const tier_state& s, usec now) {
    std::int64_t live = 0;
    for (std::size_t i = 0; i < s.data.size(); i += 2) live += s.data[i + 1] > now;
    return live;
}

check check_concurrency(const tier& t, const tier_state& s, usec now, std::uint64_t lease) {
    const std::int64_t live = live_leases(s, now);
    check c;
    c.ok = lease == 0 || live < t.limit;
    c.remaining = t.limit - live - (c.ok && lease != 0 ? 1 : 0);
    return c;
}

// Drops the lapsed leases (and with `lease`, that one too), keeping the others' order.
void drop_leases(tier_state& s, usec now, std::uint64_t lease = 0) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < s.data.size(); i += 2) {
        if (s.data[i + 1] <= now || static_cast<std::uint64_t>(s.data[i]) == lease) continue;
        s.data[kept++] = s.data[i];
        s.data[kept++] = s.data[i + 1];
    }
    s.data.resize(kept);
}

void commit_concurrency(const tier& t, tier_state& s, usec now, std::uint64_t lease, bool admitted) {
    drop_leases(s, now);
    if (!admitted || lease == 0) return;
    s.data.push_back(static_cast<std::int64_t>(lease));
    s.data.push_back(now + t.per);
}

check check_algorithm(const tier& t, const tier_state& s, usec now, std::int64_t cost, std::uint64_t lease) {
    switch (t.algo) {
        case config::algorithm::fixed:
        case config::algorithm::sliding: return check_buckets(t, s, now, cost);
        case config::algorithm::gcra: return check_gcra(t, s, now, cost);
        case config::algorithm::log: return check_log(t, s, now, cost);
        case config::algorithm::concurrency: return check_concurrency(t, s, now, lease);
    }
    return {};
}

check check_tier(const tier& t, const tier_state& s, usec now, std::int64_t cost, std::uint64_t lease) {
    check c = check_algorithm(t, s, now, cost, lease);
    if (t.min_interval > 0 && s.last != no_time && now - s.last < t.min_interval) {
        const usec interval_ok_at = s.last + t.min_interval;
        if (c.ok) {
            // Quota is left but it is too soon: report the quota as it stands.
            auto standing = check_algorithm(t, s, now, 0, 0);
            c.remaining = standing.remaining;
            c.reset = standing.reset;
            c.admit_at = interval_ok_at;
        } else {
            // Both constraints only loosen as time passes: the later instant meets both.
            c.admit_at = std::max(c.admit_at, interval_ok_at);
        }
        c.ok = false;
    }
    return c;
}

void commit_tier(const tier& t, tier_state& s, usec now, std::int64_t cost, std::uint64_t lease, bool admitted) {
    switch (t.algo) {
        case config::algorithm::fixed:
        case config::algorithm::sliding: commit_buckets(t, s, now, cost); break;
        case config::algorithm::gcra: commit_gcra(t, s, now, cost); break;
        case config::algorithm::log: commit_log(t, s, now, cost); break;
        case config::algorithm::concurrency: commit_concurrency(t, s, now, lease, admitted); break;
    }
    s.last = now;
}

const tier_state empty_state{};

}  // namespace

std::int64_t month_of(usec t) {
    namespace ch = std::chrono;
    const ch::year_month_day d{ch::floor<ch::days>(ch::sys_time<ch::microseconds>(ch::microseconds(t)))};
    return static_cast<int>(d.year()) * std::int64_t{12} + static_cast<unsigned>(d.month()) - 1;
}

usec month_start(std::int64_t index) {
    namespace ch = std::chrono;
    const std::int64_t year = floor_div(index, 12);
    const auto month = static_cast<unsigned>(index - year * 12 + 1);
    const ch::sys_days first = ch::year(static_cast<int>(year)) / ch::month(month) / 1;
    return ch::duration_cast<ch::microseconds>(first.time_since_epoch()).count();
}

std::uint64_t tier_key_of(std::string_view id) {
    std::uint64_t h = 14695981039346656037ull;  // FNV-1a
    for (unsigned char ch : id) {
        h ^= ch;
        h *= 1099511628211ull;
    }
    return h;
}

namespace {

// The values a tier derives from its limit and burst.
void derive_from_limit(tier& t) {
    t.horizon = std::max(t.per, t.min_interval);
    if (t.algo != config::algorithm::gcra) return;
    t.interval = (t.per + t.limit - 1) / t.limit;
    t.tolerance = t.burst * t.interval;
    t.horizon = std::max(t.horizon, t.tolerance);
}

}  // namespace

tier tier::from(const config::tier_config& c, std::string id, std::string name) {
    tier t;
    t.key = tier_key_of(id);
    t.id = std::move(id);
    t.name = std::move(name);
    t.algo = c.algo;
    t.limit = c.limit;
    t.per = c.per.count() * us_per_ms;
    t.min_interval = c.min_interval.count() * us_per_ms;
    switch (c.algo) {
        case config::algorithm::fixed:
            t.bucket = t.per;
            t.month = c.month;
            t.offset = c.window_offset.count() * us_per_ms;
            break;
        case config::algorithm::sliding:
            t.bucket = c.precision.count() * us_per_ms;
            t.buckets = t.per / t.bucket;
            break;
        case config::algorithm::gcra: t.burst = c.burst; break;
        case config::algorithm::log:
        case config::algorithm::concurrency: break;
    }
    derive_from_limit(t);
    return t;
}

tier tier::divided(std::int64_t n) const {
    tier t = *this;
    if (n <= 1) return t;
    t.limit = (limit + n - 1) / n;
    t.burst = (burst + n - 1) / n;
    t.min_interval = min_interval * n;  // n gateways: one admission per min_interval on average
    derive_from_limit(t);
    return t;
}

tier_state* key_state::find(std::uint64_t tier_key) {
    for (auto& s : tiers)
        if (s.key == tier_key) return &s;
    return nullptr;
}

tier_state& key_state::find_or_add(std::uint64_t tier_key) {
    if (auto* s = find(tier_key)) return *s;
    tiers.push_back(tier_state{tier_key, no_time, {}});
    return tiers.back();
}

const tier_result* decision::tightest() const {
    const auto pick = [&](bool refusing_only) {
        const tier_result* best = nullptr;
        for (const auto& r : tiers) {
            if (refusing_only && r.admitted) continue;
            if (!best || r.remaining < best->remaining || (r.remaining == best->remaining && r.reset > best->reset))
                best = &r;
        }
        return best;
    };
    const tier_result* refusing = allowed ? nullptr : pick(true);  // a refusal names a tier that refused
    return refusing ? refusing : pick(false);
}

namespace {

decision check_all(std::span<const key_request> keys, usec now, std::int64_t cost, std::uint64_t lease) {
    decision d;
    for (std::size_t k = 0; k < keys.size(); ++k) {
        key_state& ks = *keys[k].state;
        const usec at = std::max(now, ks.last_time);
        for (const tier& t : keys[k].tiers) {
            const tier_state* s = ks.find(t.key);
            auto c = check_tier(t, s ? *s : empty_state, at, cost, lease);
            // Like retry_after, reset is measured from the caller's now.
            d.tiers.push_back({&t, k, c.remaining, c.reset + (at - now), c.ok});
            if (!c.ok) {
                d.allowed = false;
                // From the caller's now, not the clamped `at`: the request is admitted once
                // the caller's clock reaches admit_at (before that, every key still clamps to
                // its own last_time), and keys with different last_times share one base.
                d.retry_after = std::max(d.retry_after, c.admit_at - now);
            }
        }
    }
    return d;
}

void commit_all(std::span<const key_request> keys, usec now, std::int64_t cost, std::uint64_t lease, bool admitted,
                receipt* taken) {
    for (const auto& kr : keys) {
        key_state& ks = *kr.state;
        const usec at = std::max(now, ks.last_time);
        if (taken) taken->at.push_back(at);
        for (const tier& t : kr.tiers) {
            tier_state& s = ks.find_or_add(t.key);
            commit_tier(t, s, at, cost, lease, admitted);
            usec until = at + t.horizon;
            // Counted past its tolerance (count_rejected, charges), a gcra state matters until its tat.
            if (t.algo == config::algorithm::gcra) until = std::max(until, s.data[0]);
            ks.expires = std::max(ks.expires, until);
        }
        ks.last_time = at;
    }
}

}  // namespace

decision decide(std::span<const key_request> keys, usec now, std::int64_t cost, bool count_rejected,
                std::uint64_t lease, receipt* taken) {
    decision d = check_all(keys, now, cost, lease);
    if (!d.allowed && !count_rejected) return d;
    commit_all(keys, now, cost, lease, d.allowed, d.allowed ? taken : nullptr);
    if (d.allowed) return d;
    return check_all(keys, now, cost, lease);  // counted though refused: it only pushed admission later
}

namespace {

void take_back_buckets(const tier& t, tier_state& s, usec at, std::int64_t amount) {
    const std::int64_t index = bucket_of(t, at);
    for (std::size_t i = 0; i < s.data.size(); i += 2) {
        if (s.data[i] != index) continue;
        s.data[i + 1] -= std::min(amount, s.data[i + 1]);
        if (s.data[i + 1] == 0)
            s.data.erase(s.data.begin() + static_cast<std::ptrdiff_t>(i),
                         s.data.begin() + static_cast<std::ptrdiff_t>(i + 2));
        return;
    }
}

void take_back_log(tier_state& s, usec at, std::int64_t amount) {
    auto [first, last] = std::equal_range(s.data.begin(), s.data.end(), at);
    s.data.erase(first, first + std::min<std::ptrdiff_t>(amount, last - first));
}

// A commit after it that came when the tat without it was already behind (one that did not
// wait behind it) absorbed part of its interval: at most clock - at in all, clock the key's
// last commit. That much stays, or a take-back could admit more than exact.
void take_back_gcra(const tier& t, tier_state& s, usec at, usec clock, usec present, std::int64_t amount) {
    const usec give = amount * t.interval - std::max<usec>(0, clock - at);
    if (s.data.empty() || s.data[0] <= present || give <= 0) return;
    s.data[0] = std::max(s.data[0] - give, present);
}

}  // namespace

void take_back(std::span<const key_request> keys, usec now, std::int64_t amount, const receipt& rc, bool whole) {
    for (std::size_t k = 0; k < keys.size() && k < rc.at.size(); ++k) {
        key_state& ks = *keys[k].state;
        const usec at = rc.at[k];
        const usec present = std::max(now, ks.last_time);
        for (const tier& t : keys[k].tiers) {
            tier_state* s = ks.find(t.key);
            if (!s) continue;
            switch (t.algo) {
                case config::algorithm::fixed:
                case config::algorithm::sliding: take_back_buckets(t, *s, at, amount); break;
                case config::algorithm::gcra: take_back_gcra(t, *s, at, ks.last_time, present, amount); break;
                case config::algorithm::log: take_back_log(*s, at, amount); break;
                case config::algorithm::concurrency: break;
            }
            if (whole && t.min_interval > 0 && s->last == at) s->last = no_time;
        }
    }
}

bool decision::retry_unknown() const {
    const auto refused_by = [&](bool concurrency) {
        return std::any_of(tiers.begin(), tiers.end(), [&](const tier_result& r) {
            return !r.admitted && (r.t->algo == config::algorithm::concurrency) == concurrency;
        });
    };
    return refused_by(true) && !refused_by(false);
}

namespace {

template <class Change>
void each_lease_tier(std::span<const key_request> keys, Change change) {
    for (const auto& kr : keys) {
        for (const tier& t : kr.tiers) {
            if (t.algo != config::algorithm::concurrency) continue;
            if (tier_state* s = kr.state->find(t.key)) change(*kr.state, t, *s);
        }
    }
}

}  // namespace

void release_lease(std::span<const key_request> keys, std::uint64_t lease) {
    each_lease_tier(keys, [&](key_state&, const tier&, tier_state& s) { drop_leases(s, no_time, lease); });
}

void renew_lease(std::span<const key_request> keys, usec now, std::uint64_t lease) {
    each_lease_tier(keys, [&](key_state& ks, const tier& t, tier_state& s) {
        const usec at = std::max(now, ks.last_time);
        for (std::size_t i = 0; i < s.data.size(); i += 2) {
            if (static_cast<std::uint64_t>(s.data[i]) != lease || s.data[i + 1] <= at) continue;
            s.data[i + 1] = at + t.per;
            ks.expires = std::max(ks.expires, at + t.per);
        }
    });
}

}  // namespace sluice::limit
