// The identify phase of a request: its head and TCP peer -> the caller, or a refusal of
// its credentials (the session answers 401 from the failure table).
//
// Thread: any thread; `clients` is shared and only read.
#pragma once

#include "http/message.hpp"
#include "identity/caller.hpp"

#include <cstdint>
#include <string>

namespace sluice::identity {

struct result {
    caller who;
    bool refused = false;  // the credentials were refused: the answer is 401
    std::string reason;    // when refused: why, safe to show the client (never echoes a credential)
};

// Who sent `req` from `peer`. The client address is the peer, or the client that trusted
// proxies name in the forwarding header (clients.trusted_proxies). With `wants_user` (the
// request's route is limited), a client not allow-listed and a user source configured,
// the user comes from the API key or JWT field or the client certificate (user_resolver: a key wins) checked at
// `now_unix_seconds`; refused credentials make the result refused. Otherwise no
// credential is read.
// `certificate`: the name the connection's verified client certificate gives the user
// (clients.user.certificate; "" = none), taken when no API key or JWT names one.
result identify(const clients& c, const http::message_head& req, const address& peer, bool wants_user,
                std::int64_t now_unix_seconds, std::string_view certificate = {});

// As identify(), for a request another proxy describes (the HTTP check): `client` is the
// address it names, taken as is (no forwarding header is walked again).
result identify_as(const clients& c, const http::message_head& req, const address& client, bool wants_user,
                   std::int64_t now_unix_seconds);

}  // namespace sluice::identity
