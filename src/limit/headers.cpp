#include "limit/headers.hpp"

#include <charconv>

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

}  // namespace

void append_rate_limit_fields(std::string& out, const decision& d, style s) {
    const tier_result* tight = d.tightest();
    if (s == style::none || !tight) return;
    const auto remaining = std::max<std::int64_t>(0, tight->remaining);
    // A concurrency tier has no reset to tell: "t" (optional in the draft) is left out.
    const bool concurrent = tight->t->algo == config::algorithm::concurrency;
    if (s == style::ietf || s == style::both) {
        out.append("RateLimit-Policy: ");
        for (std::size_t i = 0; i < d.tiers.size(); ++i) {
            const tier& t = *d.tiers[i].t;
            if (i) out.append(", ");
            append_item(out, t.name);
            out.append(";q=");
            append_number(out, t.limit);
            if (t.algo == config::algorithm::concurrency) {
                out.append(";qu=\"concurrent-requests\"");  // no window: a slot frees when a request ends
            } else {
                out.append(";w=");
                append_number(out, ceil_s(t.per));
            }
        }
        out.append("\r\nRateLimit: ");
        append_item(out, tight->t->name);
        out.append(";r=");
        append_number(out, remaining);
        if (!concurrent) {
            out.append(";t=");
            append_number(out, ceil_s(tight->reset));
        }
        out.append("\r\n");
    }
    if (s == style::legacy || s == style::both) {
        out.append("X-RateLimit-Limit: ");
        append_number(out, tight->t->limit);
        out.append("\r\nX-RateLimit-Remaining: ");
        append_number(out, remaining);
        if (!concurrent) {
            out.append("\r\nX-RateLimit-Reset: ");
            append_number(out, ceil_s(tight->reset));
        }
        out.append("\r\n");
    }
}

std::int64_t retry_after_seconds(const decision& d) {
    if (d.retry_unknown()) return 0;
    std::int64_t s = ceil_s(d.retry_after);
    if (const auto* t = d.tightest()) s = std::max(s, ceil_s(t->reset));
    return std::max<std::int64_t>(s, 1);
}

}  // namespace sluice::limit
