// The limit phase of a request: the caller's identifiers x the policy's tiers -> store ->
// verdict. It takes the caller the identify phase found and never sees an HTTP message.
//
// prepare() builds the store request from the caller's identifiers (keyed hashes, cached
// per connection); conclude() turns the store's answer into an outcome and the rate-limit
// response fields. Between them the caller asks the store, at once or after a round trip.
//
// Thread: one per session, on its worker's thread.
#pragma once

#include "identity/caller.hpp"
#include "identity/hasher.hpp"
#include "limit/offenders.hpp"
#include "limit/policy.hpp"
#include "limit/store.hpp"
#include "metrics/metrics.hpp"

#include <array>
#include <optional>
#include <string>

namespace sluice::limit {

// What became of a request's limits, as the access log names it (to_string()). none: not
// limited (no route, an unlimited route, or no identifier to limit); unauthorized: the
// identify phase refused the credentials, so the limits were never asked.
enum class decision_kind { none, bypass, allowed, limited, shadow_limited, unauthorized, forbidden, store_error };

const char* to_string(decision_kind d);

struct outcome {
    enum class kind { pass, limited, forbidden, store_down } what = kind::pass;
    std::string fields;              // rate-limit response fields ("Name: value\r\n" lines)
    std::int64_t retry_after_s = 0;  // limited
    std::string reason;              // forbidden: why, safe to show the client
    decision_kind decision = decision_kind::none;
    std::optional<identity::kind> id_kind;  // the identifier named in the access log (none: no identifier)
    digest id{};

    // Back to a pass, keeping the strings' capacity for the next request.
    void reset() {
        what = kind::pass;
        fields.clear();
        retry_after_s = 0;
        reason.clear();
        decision = decision_kind::none;
        id_kind.reset();
    }
};

// What the limit phase needs of one config snapshot.
struct admission_context {
    unsigned ipv6_prefix;  // clients.ipv6_prefix: an IPv6 client is limited by its network
    const identity::hasher& hasher;
    std::uint64_t generation;  // changes with the snapshot: cached hashes are dropped
    config::store_config::failure_mode on_error;
    config::response_config::header_style headers;
    offenders* refusals = nullptr;  // who is being limited (GET /top); null: not recorded
    lease_ids* leases = nullptr;    // for a request that meets a concurrency tier; null: none is taken
};

class admission {
public:
    // Returns true when the store must be asked (request() is then ready); false when the
    // outcome is already known (allow-listed, no identifier to limit, or 403 for a user
    // whose plan the policy has no tiers for).
    bool prepare(const admission_context& ctx, const policy& p, std::int64_t cost, const identity::caller& who,
                 outcome& out);
    // The store request; its lease is nonzero when the request meets a concurrency tier.
    const check_request& request() const { return request_; }
    // The decision, given the store's answer. Records metrics.
    void conclude(const admission_context& ctx, const policy& p, const check_result& result, metrics::shard& m,
                  outcome& out);

private:
    void record_refusal(const admission_context& ctx, const policy& p, const decision& d);

    std::array<store_key, 2> keys_;
    std::array<identity::kind, 2> kinds_{};  // keys_[i]'s kind
    check_request request_;
    // The last identifiers hashed on this connection, and the snapshot they were hashed for.
    std::uint64_t cached_for_ = 0;
    bool ip_cached_ = false, user_cached_ = false;
    identity::address cached_client_;
    digest cached_ip_{};
    std::string cached_user_;
    digest cached_user_hash_{};
};

}  // namespace sluice::limit
