// Identifier kinds as a policy names them (docs/configuration.md, "policies"): `ip`, `user`,
// `route`, `header:<name>`, `claim:<name>`, `query:<name>`, and composites of distinct parts
// joined by '+' (`header:X-Tenant+ip`: one identifier per combination). Pure: text in,
// values out; the config reader, the identify and limit steps and the admin API share it.
//
// Thread: pure functions and immutable values; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::identity {

enum class part_kind : std::uint8_t { ip, user, route, header, claim, query };

// One part of a kind. `name`: header: the field name in lower case (field names compare
// case-insensitively); claim: the JWT claim's name; query: the query parameter's name
// (both as written: they compare exactly); "" for ip, user and route.
struct kind_part {
    part_kind what = part_kind::ip;
    std::string name;
    bool operator==(const kind_part&) const = default;
};

struct kind_spec {
    std::vector<kind_part> parts;  // at least one, distinct, in written order
    // The canonical text: the parts as written, joined by '+', header names in lower case
    // ("header:x-tenant+ip"). It names the kind in tier ids, store key names, metrics, logs
    // and the rate-limit header's tier names; two specs are one kind when their texts are equal.
    std::string text;

    bool composite() const { return parts.size() > 1; }
    bool operator==(const kind_spec&) const = default;

    // The hasher's input for an identifier of this kind whose parts have `values` (one per
    // part, in order): hasher::hash(text, input). A single part: its value as is, so `ip`
    // and `user` hash exactly as they always have (the ip identifier text, the caller's user
    // string). A composite: each value as "<decimal length>:<value>", concatenated, so no
    // two combinations share an input. Writes into `out` (cleared first).
    void hash_input(std::span<const std::string_view> values, std::string& out) const;
};

// Limits of the grammar: a name has 1 to max_name_length characters; a composite at most
// max_parts parts.
inline constexpr std::size_t max_name_length = 128;
inline constexpr std::size_t max_parts = 4;

struct kind_spec_result {
    kind_spec spec;
    std::string error;  // "" when the text parsed; else why not (for a config error)
    bool ok() const { return error.empty(); }
};

// Parses a kind as a policy key writes it. Keywords are lower case. A header name is an
// HTTP token (RFC 9110) without '+'; a claim or query name is made of letters, digits and
// "!#$&'*-.^_`|~:/@" (no '+', '%', quotes or spaces). No part may repeat (header names
// compared in lower case).
kind_spec_result parse_kind_spec(std::string_view text);

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
