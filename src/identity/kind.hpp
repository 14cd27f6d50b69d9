// The kinds of identifier a request is limited by.
#pragma once

namespace sluice::identity {

enum class kind { ip, user };

// "ip" or "user": the kind as the hasher, the access log and GET /top name it. Any thread.
constexpr const char* to_string(kind k) { return k == kind::user ? "user" : "ip"; }

}  // namespace sluice::identity
