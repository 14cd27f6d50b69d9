// Rate-limit response fields, per response.headers:
//   ietf:   draft-ietf-httpapi-ratelimit-headers (-10 and later), structured fields:
//           RateLimit-Policy: "ip-1s";q=10;w=1, "ip-1h";q=240;w=3600   (every tier applied)
//           RateLimit: "ip-1h";r=1;t=1801, "ip-1s";r=3;t=1             (every tier, tightest first)
//   legacy: X-RateLimit-Limit / -Remaining / -Reset (seconds), for the tightest tier
// q is the tier's limit and w its window in whole seconds; a window that is not whole
// seconds is stated over the shortest whole-second span holding whole windows (250ms with
// limit 2: q=8;w=1). r is what remains and t the seconds (rounded up) until more quota is
// available. A concurrency tier has qu="concurrent-requests" instead of w, and neither t nor
// X-RateLimit-Reset: when a request in flight ends is unknown.
//
// Thread: pure functions.
#pragma once

#include "config/config.hpp"
#include "limit/decide.hpp"

#include <string>

namespace sluice::limit {

// Appends header lines ("Name: value\r\n") describing `d` in the chosen style.
void append_rate_limit_fields(std::string& out, const decision& d, config::response_config::header_style style);

// Whole seconds for Retry-After: the decision's retry_after rounded up (at least 1); 0 (no
// Retry-After) when only a concurrency tier refused.
std::int64_t retry_after_seconds(const decision& d);

}  // namespace sluice::limit
