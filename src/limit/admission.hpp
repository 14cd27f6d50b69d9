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
#include <string_view>

namespace sluice::limit {

// What became of a request's limits, as the access log names it (to_string()). none: not
// limited (no route, an unlimited route, or no identifier to limit); unauthorized: the
// identify phase refused the credentials, so the limits were never asked.
// missing: a kind with on_missing: refuse had no value (400); ambiguous: a kind's header
// field or query parameter was given twice with different values (400). blocked: the operator
// blocked one of the request's identifiers (limit/controls.hpp: 429, nothing charged).
enum class decision_kind {
    none,
    bypass,
    allowed,
    limited,
    shadow_limited,
    unauthorized,
    forbidden,
    store_error,
    missing,
    ambiguous,
    blocked
};

const char* to_string(decision_kind d);

// The user as the operator may see it (GET /top): an API key is a credential, so of "key:<key>"
// only the last four characters of a key of 16 or more are shown.
void append_user_label(std::string& out, std::string_view user);

struct outcome {
    // missing: a value the policy requires is missing (400; on_missing: refuse); ambiguous: a
    // value the policy limits by is given twice, differently (400); blocked: by the operator
    // (limit/controls.hpp), until retry_after_s has passed.
    enum class kind { pass, limited, forbidden, store_down, missing, ambiguous, blocked } what = kind::pass;
    std::string fields;              // rate-limit response fields ("Name: value\r\n" lines)
    std::int64_t retry_after_s = 0;  // limited, blocked
    std::string reason;              // forbidden, missing and ambiguous: why, safe to show the client
    decision_kind decision = decision_kind::none;
    // The identifier named in the access log (none: no identifier): the one whose tier refused
    // (the last in request order when several did), else the user, else the address, else the
    // first other kind.
    std::optional<identity::kind> id_kind;
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
    metrics::listener listener = metrics::listener::proxy;  // where the decision was asked (its metric's label)
};

// The most identifiers one request is limited by (ip, user and other kinds together).
inline constexpr std::size_t max_request_keys = config::max_policy_kinds;

class admission {
public:
    // Returns true when the store must be asked (request() is then ready); false when the
    // outcome is already known (allow-listed, no identifier to limit, 403 for a user whose
    // plan the policy has no tiers for, or 400 for a value the policy refuses to go without or
    // a value given twice with different values).
    // The request's keys: ip, user, then the policy's other kinds in file order, each kind
    // whose value the caller lacks left out (on_missing: skip). `route`: the route's name,
    // the value of the route kind (null: none; a pointer, not a view, which as a seventh
    // argument would go through the stack and stall the hot path). `who` and `route` must
    // stay alive until conclude().
    bool prepare(const admission_context& ctx, const policy& p, std::int64_t cost, const identity::caller& who,
                 outcome& out, const std::string* route = nullptr);
    // The store request; its lease is nonzero when the request meets a concurrency tier.
    const check_request& request() const { return request_; }
    // The decision, given the store's answer. Records metrics.
    void conclude(const admission_context& ctx, const policy& p, const check_result& result, metrics::shard& m,
                  outcome& out);

private:
    using part_values = std::array<std::string_view, config::max_parts>;

    // The values of `k`'s parts for who_; the index of the first missing part, or npos.
    std::size_t values_of(const admission_context& ctx, const kind_tiers& k, part_values& values);
    // The client's identifier text (an IPv6 address as its network), cached per connection.
    const std::string& ip_text(const admission_context& ctx);
    // Adds the keys of p's other kinds after keys_[0, n); false when one refuses a missing value.
    bool add_kinds(const admission_context& ctx, const policy& p, std::size_t& n, outcome& out);
    static void refuse_missing(outcome& out, std::string why);
    // Whether part `i` of `k` lacks a value because the request gave it twice, differently.
    bool ambiguous(const kind_tiers& k, std::size_t i) const;
    // The key whose tier refused (the last in request order when several did), or npos.
    std::size_t refusing_key(const decision& d) const;
    void set_key(std::size_t i, identity::kind kind, const digest& id, std::span<const tier> tiers,
                 std::uint32_t max_values);
    std::string label_of(const admission_context& ctx, std::size_t key);
    void record_refusal(const admission_context& ctx, const policy& p, std::size_t key);

    std::array<store_key, max_request_keys> keys_;
    std::array<const kind_tiers*, max_request_keys> kind_tiers_{};  // keys_[i]'s kind; null for ip and user
    check_request request_;
    const identity::caller* who_ = nullptr;  // prepare()'s, until conclude()
    const std::string* route_ = nullptr;
    // The last identifiers hashed on this connection, and the snapshot they were hashed for.
    std::uint64_t cached_for_ = 0;
    bool ip_cached_ = false, ip_text_cached_ = false, user_cached_ = false;
    identity::address cached_client_, cached_text_client_;
    digest cached_ip_{};
    std::string cached_ip_text_;
    std::string cached_user_;
    digest cached_user_hash_{};
    std::string input_;  // a composite's hash input, its capacity kept
};

}  // namespace sluice::limit
