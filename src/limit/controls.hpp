// The operator's hand on single callers (the admin API: docs/operations.md, "Admin
// endpoints"): blocks and overrides, as stored (control_record: one HASH field each on Redis,
// so that every gateway of a fleet applies them) and as the limit step applies them
// (controls: an immutable snapshot every worker holds; control_step: one request).
//
// A block refuses an identifier on every route whose policy limits its kind, until it ends,
// before the store is asked: nothing is charged. An override gives an identifier other tiers
// in one policy (compiled like the config's, with ids of their own,
// "<policy>!<set at, ms>/<kind>/...", so that their counts start afresh each time one is set),
// or, for a user, another plan (the plan's own tiers and counts). Entries past their end are
// left out of a snapshot, and skipped by a snapshot that outlives them.
//
// Thread: records and controls are values (a controls is immutable once built, shared by
// every worker); a control_step belongs to one session.
#pragma once

#include "identity/hasher.hpp"
#include "identity/kind.hpp"
#include "limit/admission.hpp"
#include "limit/policy.hpp"
#include "limit/store.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::limit {

// One block or override as stored: a field and a JSON value.
//   block     field "b:<32 hex>:<kind>"            value {"at":ms,"until":ms}
//   override  field "o:<32 hex>:<policy>:<kind>"   value {"at":ms,"until":ms,"tiers":[...]}
//             field "o:<32 hex>:@:<kind>"          value {"at":ms,"until":ms,"plan":"<name>"}
// <32 hex> is the identifier's keyed hash (the store never sees a value), <kind> its canonical
// text, times are Unix milliseconds.
struct control_record {
    enum class type { block, override_tiers, override_plan };
    type what = type::block;
    std::string kind;
    digest id{};
    std::string policy;  // override_tiers
    std::string plan;    // override_plan
    std::string tiers;   // override_tiers: the JSON list of tiers, as the admin API took it
    std::int64_t at_ms = 0, until_ms = 0;

    std::string field() const;
    std::string value() const;
    // nullopt for a field or value of another shape (written by another version: skipped).
    static std::optional<control_record> parse(std::string_view field, std::string_view value);
    // The field of a block, or of an override of `policy` ("" for a plan), of (kind, id).
    static std::string block_field(std::string_view kind, const digest& id);
    static std::string override_field(std::string_view kind, const digest& id, std::string_view policy);
};

class controls {
public:
    struct override_entry {
        std::string policy;  // tiers for this policy; "" for a plan
        std::string plan;
        std::vector<tier> tiers;
        bool concurrent = false;  // some tier is a concurrency tier: the request needs a lease
        std::int64_t until_ms = 0;
    };
    struct entry {
        std::int64_t block_until_ms = 0;  // 0: not blocked
        std::vector<override_entry> overrides;
    };

    // From stored records, at `now_ms`: entries past their end are left out, as are records
    // whose kind or tiers this version cannot read (each named in `skipped`).
    static std::shared_ptr<const controls> build(std::vector<control_record> records, std::int64_t now_ms,
                                                 std::vector<std::string>* skipped = nullptr);

    bool empty() const { return map_.empty(); }
    bool has_plans() const { return has_plans_; }
    const entry* find(identity::kind k, const digest& id) const;
    // Every record in effect, as stored (for GET /overrides and GET /identities).
    const std::vector<control_record>& records() const { return records_; }
    // The earliest end of an entry (INT64_MAX: none): the snapshot is rebuilt then.
    std::int64_t next_end_ms() const { return next_end_ms_; }
    std::size_t blocks() const { return blocks_; }
    std::size_t overrides() const { return records_.size() - blocks_; }

private:
    struct key {
        identity::kind kind;
        digest id;
        bool operator==(const key&) const = default;
    };
    struct key_hash {
        std::size_t operator()(const key& k) const;
    };
    std::unordered_map<key, entry, key_hash> map_;
    std::vector<control_record> records_;
    std::int64_t next_end_ms_ = INT64_MAX;
    std::size_t blocks_ = 0;
    bool has_plans_ = false;
};

using controls_ptr = std::shared_ptr<const controls>;

// Compiles an override's tiers (config::read_override_tiers's) for `policy`: ids
// "<policy>!<at_ms>/<kind>/...", names as the config's tiers of that kind get.
std::vector<tier> compile_override(const std::string& policy, std::int64_t at_ms,
                                   const std::vector<config::tier_config>& tiers);

// Unix time in milliseconds, now.
std::int64_t unix_ms();

// What the controls say of one request, after admission::prepare() (limit_step).
class control_step {
public:
    enum class result { none, blocked, overridden };

    // The plan a plan override gives user `user_id` now, or null.
    static const std::string* plan_of(const controls& c, const digest& user_id, std::int64_t now_ms);

    // Blocked when a key of `r` is blocked (blocked_key(), blocked_until_ms()); overridden
    // when some key has an override for `p`: request() is then `r` with those keys' tiers
    // replaced (and a lease drawn from `leases` when they bring a concurrency tier).
    result apply(const controls& c, const policy& p, const check_request& r, std::int64_t now_ms, lease_ids* leases);
    const check_request& request() const { return request_; }
    std::size_t blocked_key() const { return blocked_key_; }
    std::int64_t blocked_until_ms() const { return blocked_until_ms_; }

private:
    std::array<store_key, max_request_keys> keys_;
    check_request request_;
    std::size_t blocked_key_ = 0;
    std::int64_t blocked_until_ms_ = 0;
};

}  // namespace sluice::limit
