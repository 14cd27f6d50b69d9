// Rate-limit descriptors (Envoy's RLS: a domain and lists of key/value entries) into store
// requests: the domains of service.domains compiled once per snapshot, a descriptor matched
// down its domain's tree, and the descriptors of one call made into one check_request, so
// that they are decided and committed together as the identifiers of one HTTP request are.
// A request has one cost: counted descriptors of different costs (each its own hits_addend)
// are one request per cost (charged_groups()), which service/rls asks in turn, giving back
// exactly the groups admitted before one that refuses.
//
// A node in shadow mode (shadow_mode: true) has its tiers charged as any other's, but its
// refusal never refuses the call: its descriptors are a request of their own, asked only once
// the call is admitted (a refused call still consumes nothing anywhere); service/rls asks
// each of its counted identifiers alone (at its own cost), so that they count independently.
//
// A descriptor that matches a node with tiers is an identifier of the node's kind
// ("descriptor:<path>", the path of keys, and values where the config names them) whose value
// is the descriptor's entry values (config::kind_spec::hash_input), keyed-hashed as every
// identifier.
//
// A node with `tiers: plan` takes the descriptor's value as an API key, looked up in the key
// registry as the gateway looks up its API key header (identity::user_resolver::resolve_key):
// the identifier is the user ("user:<name>", or "key:<key>" when the registry does not require
// known keys), limited by its plan's user tiers (the entry's plan, else
// clients.user.default_plan). Naming a policy with `user: plan`, it is the gateway's own user
// identifier with that policy's plan tiers (one quota whichever path asks); else an identifier
// of the node's kind, tier ids "<domain>@<plan>/descriptor:<path>/...". A key the registry
// refuses, or a user without a plan the config has, is refused before the store is asked.
//
// Thread: compiled domains are immutable and shared; a descriptor_check is one call's, on
// its worker's thread.
#pragma once

#include "config/config.hpp"
#include "identity/hasher.hpp"
#include "identity/kind.hpp"
#include "identity/user.hpp"
#include "limit/admission.hpp"
#include "limit/decide.hpp"
#include "limit/policy.hpp"
#include "limit/store.hpp"

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::limit {

struct descriptor_node {
    std::string key;
    std::optional<std::string> value;  // unset: any value
    identity::kind kind = identity::kind::ip;
    std::vector<tier> tiers;  // empty: a descriptor ending here is not limited
    std::vector<descriptor_node> children;
    bool shadow = false;          // its tiers are counted, its refusals never refuse the call
    bool prefix = false;          // value ends in '*': it matches any value starting with the rest
    std::size_t metric_slot = 0;  // with tiers: metrics::registry::slot("descriptor", ...), set by the snapshot
    // tiers: plan (`tiers` empty): each plan's tiers, and the kind of the identifier (user when
    // shared with a policy, else `kind`).
    bool by_plan = false;
    std::vector<plan_tiers> plans;
    identity::kind user_kind = identity::kind::ip;

    bool limited() const { return !tiers.empty() || by_plan; }
};

struct descriptor_domain {
    std::string name;
    std::vector<descriptor_node> nodes;
    std::size_t unknown_slot = 0;  // the metric slot of its descriptors that match no tiers
};

// Every domain of `c`, in file order; tier ids "<domain>/<kind>/...", as a policy's.
// `policies`: compile_policies(c), whose plan tiers a node with `tiers: plan` and `policy` shares.
std::vector<descriptor_domain> compile_domains(const config::config& c, std::span<const policy> policies);
const descriptor_domain* find_domain(std::span<const descriptor_domain> domains, std::string_view name);

struct descriptor_entry {
    std::string_view key, value;
};

// The node the entries lead to (each entry the node of its key and value, else the first of
// its key whose prefix value (envoyproxy/ratelimit's "value*") starts the value, else of its
// key alone, among the previous one's children), or null when an entry matches none.
const descriptor_node* match(const descriptor_domain& d, std::span<const descriptor_entry> entries);

// One descriptor of a call: its entries and its cost (hits_addend; 0 asks without counting).
struct descriptor_ask {
    std::span<const descriptor_entry> entries;
    std::int64_t cost = 1;
};

// What `tiers: plan` reads: the snapshot's key registry and clients.user.default_plan.
struct key_registry {
    const identity::user_resolver* users = nullptr;
    std::string_view default_plan;
};

class descriptor_check {
public:
    // Why a descriptor of a `tiers: plan` node was refused before the store was asked.
    enum class refusal { none, unknown_key, no_plan };
    // Where a descriptor's answer is: in the charged request, the queried one (cost 0), their
    // shadow counterparts (nodes in shadow mode: asked only when the call is admitted, never
    // refusing it), or none (no domain, no matching node, or a node without tiers: allowed,
    // not limited).
    enum class part { none, charged, queried, shadow, shadow_queried };
    static constexpr std::size_t parts = 4;  // the parts with a request
    struct slot {
        part in = part::none;
        std::size_t key = 0;  // its identifier's index in that request's keys
        refusal refused = refusal::none;
    };

    // Builds the requests for `asks` in domain `d` (null: an unknown domain). "" when the
    // call can be decided, else why it cannot: more distinct identifiers than one store
    // request carries (one identifier at two costs is two), or a descriptor without entries.
    std::string prepare(const identity::hasher& hasher, const descriptor_domain* d,
                        std::span<const descriptor_ask> asks, const key_registry& registry = {});

    // The request of part `p` (not none); empty keys when no descriptor is in it. The queried
    // ones (cost 0) ask without writing. Its cost is its first key's: a part whose keys have
    // several costs is asked by charged_groups() (charged) or key by key (shadow, key_cost()).
    const check_request& request(part p) const { return requests_[index(p)]; }
    // The descriptors that count (cost > 0), ordered by cost.
    const check_request& charged() const { return request(part::charged); }
    const check_request& queried() const { return request(part::queried); }
    // charged() as one request per distinct cost, by increasing cost: consecutive spans of its
    // keys (a group's key i is charged key i + the keys of the groups before it). One group
    // (the common case) is charged() itself.
    std::span<const check_request> charged_groups() const { return std::span(groups_.data(), group_count_); }
    // The cost of key `key` of part `p`.
    std::int64_t key_cost(part p, std::size_t key) const { return costs_[index(p)][key]; }
    std::span<const slot> slots() const { return slots_; }
    // The matched node of descriptor i (null: not limited).
    const descriptor_node* node(std::size_t i) const { return nodes_[i]; }
    // Descriptor i of a `tiers: plan` node: its user ("user:<name>", "key:<key>"), else "".
    const std::string& user(std::size_t i) const { return users_[i]; }
    // A descriptor not in shadow mode was refused by the key registry or for its plan: the
    // call is refused and the store is not asked.
    bool refused() const { return refused_; }

    static std::size_t index(part p) { return static_cast<std::size_t>(p) - 1; }
    static bool is_shadow(part p) { return p == part::shadow || p == part::shadow_queried; }

private:
    // Adds (or finds) identifier `id` of `kind` with `tiers` to part p's keys; its index, or
    // npos when full.
    std::size_t add_key(identity::kind kind, const digest& id, std::span<const tier> tiers, std::int64_t cost,
                        std::size_t p);
    // Orders the charged keys by cost (their slots follow) and makes charged_groups().
    void group_charged();
    // The identifier of plain node `n` for `entries`.
    digest id_of(const identity::hasher& hasher, const descriptor_node& n, std::span<const descriptor_entry> entries);

    std::array<std::array<store_key, max_request_keys>, parts> keys_;
    std::array<std::array<std::int64_t, max_request_keys>, parts> costs_{};
    std::array<std::size_t, parts> counts_{};
    std::array<check_request, parts> requests_;
    std::array<check_request, max_request_keys> groups_;
    std::size_t group_count_ = 0;
    std::vector<slot> slots_;
    std::vector<const descriptor_node*> nodes_;
    std::vector<std::string> users_;
    bool refused_ = false;
    std::string input_;
};

}  // namespace sluice::limit
