// The admin API's calls to the Redis script, without sockets (lua/parts/admin.lua): an
// identifier's tiers forgotten (mode reset), and the blocks and overrides every gateway of a
// fleet applies, one HASH of entries with a version (mode control).
//
// Thread: pure functions.
#pragma once

#include "limit/store.hpp"

#include <hiredis/hiredis.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::store::redis_admin {

// The EVALSHA (mode reset) that forgets identifier `k`'s tiers: its HASH's fields of each
// tier (the head, "|o" and "|m") and its log tiers' ZSETs. Its reply: an integer.
std::string format_reset(std::string_view sha, std::string_view key_prefix, const limit::store_key& k);

// "<prefix>{sluice:controls}": the controls' HASH (one hash slot).
std::string controls_key(std::string_view key_prefix);

// The EVALSHA (mode control) of `args` (the operation and its arguments) on the controls' HASH.
std::string format_control(std::string_view sha, std::string_view key_prefix, std::span<const std::string> args);

// A control call's reply: the version after it, and for a read of another version than the
// caller's, `changed` and every entry (field, value) in `entries`.
struct control_reply {
    std::int64_t version = 0;
    bool changed = false;
    std::vector<std::pair<std::string, std::string>> entries;
};
// nullopt for an error reply or one of another shape.
std::optional<control_reply> parse_control(const redisReply* reply);

}  // namespace sluice::store::redis_admin
