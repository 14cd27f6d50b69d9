#include "limit/rate_limit_fields.hpp"

#include <charconv>
#include <numeric>
#include <utility>

namespace sluice::limit {

using style = config::response_config::header_style;

namespace {

void append_item(std::string& out, const std::string& name) {
    out.push_back('"');
    out.append(name);
    out.push_back('"');
}

void append_number(std::string& out, std::int64_t n) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, n);
    out.append(buf, r.ptr);
}

// A whole-second window that states the tier truly: its own when `per` is whole seconds,
// else the shortest whole number of seconds that holds a whole number of windows (250ms:
// q=4*limit per 1 s; 1500ms: q=2*limit per 3 s), when that is at most a minute; else its
// average rate over ceil(per), rounded down so that it never promises more.
std::pair<std::int64_t, std::int64_t> policy_window(const tier& t) {
    constexpr std::int64_t sec = 1'000'000;
    if (t.per % sec == 0) return {t.limit, t.per / sec};
    const std::int64_t common = std::lcm(t.per, sec);
    if (common <= 60 * sec) return {t.limit * (common / t.per), common / sec};
    const std::int64_t w = ceil_s(t.per);
    // In 128 bits: limit * w * 1e6 passes 2^63 for a long per with a large limit.
    const auto scaled = static_cast<__int128>(t.limit) * w * sec / t.per;
    return {std::max<std::int64_t>(1, static_cast<std::int64_t>(scaled)), w};
}

void append_policy_item(std::string& out, const tier& t) {
    append_item(out, t.name);
    if (t.algo == config::algorithm::concurrency) {
        out.append(";q=");
        append_number(out, t.limit);
        out.append(";qu=\"concurrent-requests\"");  // no window: a slot frees when a request ends
        return;
    }
    const auto [q, w] = policy_window(t);
    out.append(";q=");
    append_number(out, q);
    out.append(";w=");
    append_number(out, w);
}

// A concurrency tier has no reset to tell: "t" (optional in the draft) is left out.
void append_limit_item(std::string& out, const tier_result& r) {
    append_item(out, r.t->name);
    out.append(";r=");
    append_number(out, std::max<std::int64_t>(0, r.remaining));
    if (r.t->algo == config::algorithm::concurrency) return;
    out.append(";t=");
    append_number(out, ceil_s(r.reset));
}

}  // namespace

void append_rate_limit_fields(std::string& out, const decision& d, style s) {
    const tier_result* tight = d.tightest();
    if (s == style::none || !tight) return;
    if (s == style::ietf || s == style::both) {
        out.append("RateLimit-Policy: ");
        for (std::size_t i = 0; i < d.tiers.size(); ++i) {
            if (i) out.append(", ");
            append_policy_item(out, *d.tiers[i].t);
        }
        // One item per tier, the tightest first: a client that reads only the first item
        // reads the one that binds.
        out.append("\r\nRateLimit: ");
        append_limit_item(out, *tight);
        for (const auto& r : d.tiers) {
            if (&r == tight) continue;
            out.append(", ");
            append_limit_item(out, r);
        }
        out.append("\r\n");
    }
    if (s == style::legacy || s == style::both) {
        out.append("X-RateLimit-Limit: ");
        append_number(out, tight->t->limit);
        out.append("\r\nX-RateLimit-Remaining: ");
        append_number(out, std::max<std::int64_t>(0, tight->remaining));
        if (tight->t->algo != config::algorithm::concurrency) {
            out.append("\r\nX-RateLimit-Reset: ");
            append_number(out, ceil_s(tight->reset));
        }
        out.append("\r\n");
    }
}

// Exact: the retry rounded up. Not raised to RateLimit's t: a min_interval refusal (or a
// tier with quota left that another tier's wait does not govern) passes sooner than the
// quota resets, and a client that honours Retry-After must not wait for the reset.
std::int64_t retry_after_seconds(const decision& d) {
    if (d.retry_unknown()) return 0;
    return std::max<std::int64_t>(ceil_s(d.retry_after), 1);
}

}  // namespace sluice::limit
