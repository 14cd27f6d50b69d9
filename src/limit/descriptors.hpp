// Rate-limit descriptors (Envoy's RLS: a domain and lists of key/value entries) into store
// requests: the domains of service.domains compiled once per snapshot, a descriptor matched
// down its domain's tree, and the descriptors of one call made into one check_request, so
// that they are decided and committed together as the identifiers of one HTTP request are.
//
// A node in shadow mode (shadow_mode: true) has its tiers charged as any other's, but its
// refusal never refuses the call: its descriptors are a request of their own, asked only once
// the call is admitted (a refused call still consumes nothing anywhere); service/rls asks
// each of its counted identifiers alone, so that they count independently.
//
// A descriptor that matches a node with tiers is an identifier of the node's kind
// ("descriptor:<path>", the path of keys, and values where the config names them) whose value
// is the descriptor's entry values (config::kind_spec::hash_input), keyed-hashed as every
// identifier.
//
// Thread: compiled domains are immutable and shared; a descriptor_check is one call's, on
// its worker's thread.
#pragma once

#include "config/config.hpp"
#include "identity/hasher.hpp"
#include "identity/kind.hpp"
#include "limit/admission.hpp"
#include "limit/decide.hpp"
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
};

struct descriptor_domain {
    std::string name;
    std::vector<descriptor_node> nodes;
    std::size_t unknown_slot = 0;  // the metric slot of its descriptors that match no tiers
};

// Every domain of `c`, in file order; tier ids "<domain>/<kind>/...", as a policy's.
std::vector<descriptor_domain> compile_domains(const config::service_config& c);
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

class descriptor_check {
public:
    // Where a descriptor's answer is: in the charged request, the queried one (cost 0), their
    // shadow counterparts (nodes in shadow mode: asked only when the call is admitted, never
    // refusing it), or none (no domain, no matching node, or a node without tiers: allowed,
    // not limited).
    enum class part { none, charged, queried, shadow, shadow_queried };
    static constexpr std::size_t parts = 4;  // the parts with a request
    struct slot {
        part in = part::none;
        std::size_t key = 0;  // its identifier's index in that request's keys
    };

    // Builds the requests for `asks` in domain `d` (null: an unknown domain). "" when the
    // call can be decided, else why it cannot: more distinct identifiers than one store
    // request carries, a descriptor without entries, or counted descriptors of different
    // costs (one request has one cost: they could not be committed together).
    std::string prepare(const identity::hasher& hasher, const descriptor_domain* d,
                        std::span<const descriptor_ask> asks);

    // The request of part `p` (not none); empty keys when no descriptor is in it. The queried
    // ones (cost 0) ask without writing.
    const check_request& request(part p) const { return requests_[index(p)]; }
    // The descriptors that count (cost > 0), one decision.
    const check_request& charged() const { return request(part::charged); }
    const check_request& queried() const { return request(part::queried); }
    std::span<const slot> slots() const { return slots_; }
    // The matched node of descriptor i (null: not limited).
    const descriptor_node* node(std::size_t i) const { return nodes_[i]; }

    static std::size_t index(part p) { return static_cast<std::size_t>(p) - 1; }
    static bool is_shadow(part p) { return p == part::shadow || p == part::shadow_queried; }

private:
    // Adds (or finds) the identifier of `n` for `entries` to part p's keys; its index, or npos
    // when full.
    std::size_t add_key(const identity::hasher& hasher, const descriptor_node& n,
                        std::span<const descriptor_entry> entries, std::size_t p);

    std::array<std::array<store_key, max_request_keys>, parts> keys_;
    std::array<std::size_t, parts> counts_{};
    std::array<check_request, parts> requests_;
    std::vector<slot> slots_;
    std::vector<const descriptor_node*> nodes_;
    std::string input_;
};

}  // namespace sluice::limit
