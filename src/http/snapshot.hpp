// Everything a worker needs from one configuration, compiled once: the config, the
// routes and policies, the client address sets and the user resolver.
//
// Thread: immutable after build(); shared by every worker. A worker holds it through a
// worker-local shared_ptr so that copying it per request touches no shared cache line.
#pragma once

#include "config/config.hpp"
#include "identity/address.hpp"
#include "identity/user.hpp"
#include "limit/rules.hpp"
#include "metrics/metrics.hpp"

#include <memory>
#include <optional>

namespace sluice::http {

struct snapshot {
    snapshot(std::shared_ptr<const config::config> c, metrics::registry& m);

    std::shared_ptr<const config::config> cfg;
    limit::rules rules;
    identity::cidr_set trusted, allow;
    std::optional<identity::user_resolver> users;  // absent when no user source is configured
    std::size_t unmatched_slot = 0;                 // metrics slot for requests no route matches
};

}  // namespace sluice::http
