// The kinds of identifier a request is limited by.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::identity {

// A kind of identifier: ip, user, upstream (a pool's own identifier, for its in-flight cap:
// upstreams.<name>.max_in_flight), or any other a policy names (identity/kind_spec.hpp:
// header:<name>, claim:<name>, query:<name>, route and composites), by a number kind_of()
// gives its canonical text. A kind is a small number the memory store keys its map with;
// its text names it in the hasher, the access log, GET /top and the store's key names.
enum class kind : std::uint16_t { ip = 0, user = 1, upstream = 2 };

// The kinds kind_of() can give in one process (ip, user and upstream included).
inline constexpr std::size_t max_kinds = 4096;

// The kind whose canonical text is `text`: one text is one kind for the life of the process
// (a reload that keeps a policy's kind keeps its memory-store counters). "ip", "user" and
// "upstream" are those three. Throws std::length_error past max_kinds distinct texts. Any
// thread (a mutex: call it when compiling a config, not per request).
kind kind_of(std::string_view text);

// The kind's canonical text ("ip", "user", "upstream", "header:x-tenant+ip", ...), null
// terminated and valid for the life of the process; "" for a number kind_of() never gave.
// Any thread, lock-free.
const char* to_string(kind k);

}  // namespace sluice::identity
