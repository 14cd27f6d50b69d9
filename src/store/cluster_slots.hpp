// Redis Cluster without sockets: a key's hash slot, the slot map read from CLUSTER SLOTS,
// and MOVED / ASK redirections (the Redis Cluster specification, "Keys distribution model"
// and "Redirection and resharding").
//
// Thread: pure functions.
#pragma once

#include "config/config.hpp"

#include <hiredis/hiredis.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace sluice::store::cluster {

constexpr std::size_t slot_count = 16384;

// CRC16 (XMODEM) of the key's hash tag (the text between the first '{' and the next '}',
// when not empty) or else of the whole key, modulo 16384.
std::uint16_t key_slot(std::string_view key);

struct slot_range {
    std::uint16_t first = 0, last = 0;  // inclusive
    config::host_port primary;
};

// The ranges of a CLUSTER SLOTS reply; nullopt if it is not one. A node that reports an
// empty or "?" address is named by `fallback_host` (the host the reply came from).
std::optional<std::vector<slot_range>> parse_slots(const redisReply* reply, std::string_view fallback_host);

struct redirect {
    enum class kind { moved, ask } what = kind::moved;
    std::uint16_t slot = 0;
    config::host_port target;
};

// "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>"; nullopt for any other reply.
std::optional<redirect> parse_redirect(const redisReply* reply);

}  // namespace sluice::store::cluster
