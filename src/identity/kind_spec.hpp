// Identifier kinds (config/kind_spec.hpp: `ip`, `user`, `route`, `header:<name>`,
// `claim:<name>`, `query:<name>` and composites joined by '+') as the identify and limit steps
// and the admin API use them: the grammar and hash inputs, and an identifier from the admin
// API's path.
//
// Thread: pure functions and immutable values; any thread.
#pragma once

#include "config/config.hpp"
#include "config/kind_spec.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sluice::identity {

using config::kind_part;
using config::kind_spec;
using config::kind_spec_result;
using config::max_name_length;
using config::max_parts;
using config::parse_kind_spec;
using config::part_kind;

// The header fields, JWT claims and query parameters a config's policies limit by, each
// list sorted and without repeats (header names in lower case). The identify step reads
// these alone, the caller holds their values in this order, and the limit step finds a
// part's value by its index here.
struct kind_names {
    std::vector<std::string> headers, claims, queries;

    bool empty() const { return headers.empty() && claims.empty() && queries.empty(); }
    // The index of a header, claim or query part's name in its list (the part must be one
    // of `policies` names_used() was given); 0 for ip, user and route.
    std::size_t index_of(const kind_part& p) const;
};
kind_names names_used(const std::vector<config::policy_config>& policies);

// The identifier of kind `spec` named in an admin API path, /identities/<kind>/<value>:
// `raw` is the <value> segment as received, still percent-encoded. A composite's value is
// its parts' values joined by '+' (a '+' inside a part is written %2B), each part
// percent-decoded after the split; a single part's whole segment is one value. Each value:
// ip an IPv4 or IPv6 address, normalised as the limiter does (an IPv6 address to its
// `ipv6_prefix` network; "2001:db8:1:2::/64" as GET /top shows one is taken too, its prefix
// must then be `ipv6_prefix`); user the caller's user string: "key:<api key>",
// "user:<name>", "jwt:<subject>" or "cert:<name>"; route a route's name; header, claim and
// query the value as the request carried it. No value may be empty.
struct path_identifier {
    std::string hash_input;  // hasher::hash(spec.text, hash_input) is the identifier's hash
    std::string error;       // "" when the value is good; else why not (safe to show)
    bool ok() const { return error.empty(); }
};
path_identifier identifier_from_path(const kind_spec& spec, std::string_view raw, unsigned ipv6_prefix);

// Percent-decodes `s` into `out` ('+' stays '+'); false on a '%' not followed by two hex digits.
bool percent_decode(std::string_view s, std::string& out);

}  // namespace sluice::identity
