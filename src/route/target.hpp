// The request target, parsed and normalised before routing (RFC 9112 3.2, RFC 3986 6.2.2).
//
// The path a route is matched against is the path forwarded upstream, so an upstream that
// reads a request as /login cannot be reached by a spelling that misses /login's limit:
//   - percent-encoded unreserved bytes (ALPHA DIGIT - . _ ~) are decoded, every other
//     percent-encoding is kept with its hex digits upper-cased;
//   - dot segments are removed after decoding (RFC 3986 5.2.4), never above the root;
//     a segment whose name (the part before ';') is "." or ".." counts as one;
//   - repeated slashes are merged, so no segment is empty but a trailing one;
//   - ";params" stay in `path` but not in `match_path`.
// Refused (parse_target returns the reason): %2F, %5C, %00, malformed %-escapes, a raw
// backslash, '#', control, space or non-ASCII bytes in the path; control bytes in the
// query; userinfo or a bad authority in absolute-form; '*' with any method but OPTIONS;
// a target of no known form.
//
// Thread: pure functions, callable from any thread.
#pragma once

#include <string>
#include <string_view>

namespace sluice::route {

enum class target_form { origin, absolute, asterisk, authority };

struct request_target {
    target_form form = target_form::origin;
    std::string path;       // normalised, as forwarded upstream; "*" for asterisk-form; "" for authority-form
    std::string query;      // "" or "?..." exactly as received
    std::string host;       // absolute-form: the authority's host, lower-case, without port ("" otherwise);
                            // an IPv6 literal keeps its brackets, like a Host header's
    std::string authority;  // absolute-form: host[:port] as received ("" otherwise)
    // The path routes compare against: `path` with every segment's ";params" removed.
    std::string match_path;

    // Empties every field, keeping the strings' capacity.
    void clear();
};

// Parses and normalises `raw`, the request target of a request with `method`; CONNECT is
// always authority-form (nothing else is read). Returns nullptr on success, or a short
// static reason for a 400. On failure `out` holds no meaningful value. Reuses `out`'s
// capacity: one request_target per connection allocates only while its paths grow.
const char* parse_target(std::string_view method, std::string_view raw, request_target& out);

}  // namespace sluice::route
