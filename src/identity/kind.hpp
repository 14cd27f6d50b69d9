// The kinds of identifier a request is limited by.
#pragma once

namespace sluice::identity {

// upstream: a pool's own identifier, for its in-flight cap (upstreams.<name>.max_in_flight).
enum class kind { ip, user, upstream };

// "ip", "user" or "upstream": the kind as the hasher, the access log, GET /top and the
// store's key names name it. Any thread.
constexpr const char* to_string(kind k) { return k == kind::user ? "user" : k == kind::upstream ? "upstream" : "ip"; }

}  // namespace sluice::identity
