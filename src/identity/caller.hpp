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
#include "identity/kind_spec.hpp"
#include "identity/user.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::identity {

// The client settings of one config, compiled once.
struct clients {
    // `policies`: the config's, for the header fields, claims and query parameters they limit by.
    explicit clients(const config::clients_config& c, const std::vector<config::policy_config>& policies = {});

    const config::clients_config& cfg;  // owned by the config snapshot
    cidr_set trusted, allow;
    std::optional<user_resolver> users;  // absent when no user source is configured
    kind_names names;                    // what identify() reads for header:, claim: and query: kinds
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
    // Room for a kind to come; nothing fills it yet: a verified client certificate's chosen name.
    std::string certificate;
    // The values of the header fields, JWT claims and query parameters the policies limit by,
    // one per name of clients::names in its order; nullopt where the request has none. Filled
    // as `user` is: only for a limited route and a client not allow-listed (else empty).
    std::vector<std::optional<std::string>> headers, claims, queries;
};

}  // namespace sluice::identity
