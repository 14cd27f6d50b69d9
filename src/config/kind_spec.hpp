// Identifier kinds as a policy names them (docs/configuration.md, "policies"): `ip`, `user`,
// `route`, `header:<name>`, `claim:<name>`, `query:<name>`, and composites of distinct parts
// joined by '+' (`header:X-Tenant+ip`: one identifier per combination). Pure text: the config
// reader checks a policy's keys with it; identity/kind_spec.hpp adds what needs addresses.
//
// Thread: pure functions and immutable values; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

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
    // two combinations share an input. Writes into `out` (cleared first). The same for any
    // list of values (a rate-limit descriptor's entries).
    static void hash_input(std::span<const std::string_view> values, std::string& out);
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
// HTTP token (RFC 9110, the field-name syntax) without '+'; a claim or query name is made of letters, digits and
// "!#$&'*-.^_`|~:/@" (no '+', '%', quotes or spaces). No part may repeat (header names
// compared in lower case).
kind_spec_result parse_kind_spec(std::string_view text);

// Appends one part as the canonical text writes it ("header:x-tenant").
void append_part_text(std::string& out, const kind_part& p);

}  // namespace sluice::config
