// Who is calling: the client address behind trusted proxies, whether it is allow-listed,
// and the user an API key or JWT names.
//
// Thread: `clients` is immutable after construction and shared by every worker;
// identify() may run on any thread.
#pragma once

#include "config/config.hpp"
#include "http/message.hpp"
#include "identity/address.hpp"
#include "identity/user.hpp"

#include <cstdint>
#include <optional>

namespace sluice::identity {

// The client settings of one config, compiled once.
struct clients {
    explicit clients(const config::clients_config& c);

    const config::clients_config& cfg;  // owned by the config snapshot
    cidr_set trusted, allow;
    std::optional<user_resolver> users;  // absent when no user source is configured
};

struct caller {
    address client;             // the peer, or the client a trusted proxy names
    bool peer_trusted = false;  // the peer is a trusted proxy
    bool allow_listed = false;
};

// The client address of a request from `peer` (peer and proxies' addresses as clients.trusted says).
caller identify_client(const clients& c, const http::message_head& req, const address& peer);

// The user of a request, from its API key or JWT field.
user_result identify_user(const user_resolver& users, const http::message_head& req, std::int64_t now_unix_seconds);

}  // namespace sluice::identity
