// Who is calling: the client address behind trusted proxies, whether it is allow-listed,
// and the user an API key or JWT names. Nothing here knows HTTP: identify.hpp reads a
// request's head into a caller, and the limit step takes the caller alone.
//
// Thread: `clients` is immutable after construction and shared by every worker; a caller
// is a value of one request.
#pragma once

#include "config/config.hpp"
#include "identity/address.hpp"
#include "identity/kind.hpp"
#include "identity/user.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::identity {

// The client settings of one config, compiled once.
struct clients {
    explicit clients(const config::clients_config& c);

    const config::clients_config& cfg;  // owned by the config snapshot
    cidr_set trusted, allow;
    std::optional<user_resolver> users;  // absent when no user source is configured
};

// The caller of one request, as the identify step found it.
struct caller {
    address client;             // the peer, or the client a trusted proxy names
    bool peer_trusted = false;  // the peer is a trusted proxy
    bool allow_listed = false;  // in clients.allow: bypasses every limit
    // The user an API key or JWT names: "user:<registry name>", "key:<api key>" or
    // "jwt:<claim>" ("" = none; hash it before use), and its plan: the registry entry's or
    // the JWT plan claim's, else clients.user.default_plan ("" = none). Only read when the
    // request's route is limited and the client is not allow-listed.
    std::string user;
    std::string plan;
    // Room for the kinds to come; nothing fills them yet: a verified client certificate's
    // chosen name, configured headers' values and JWT claims, each as (name, value).
    std::string certificate;
    std::vector<std::pair<std::string, std::string>> headers;
    std::vector<std::pair<std::string, std::string>> claims;
};

}  // namespace sluice::identity
