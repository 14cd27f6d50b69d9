// Everything a worker needs from one configuration, compiled once: the config, the
// policies and routes, and the client settings (address sets, user resolver).
//
// Thread: immutable after construction; shared by every worker. A worker holds it through
// a worker-local shared_ptr so that copying it per request touches no shared cache line.
#pragma once

#include "config/config.hpp"
#include "identity/address.hpp"
#include "identity/caller.hpp"
#include "limit/descriptors.hpp"
#include "limit/policy.hpp"
#include "metrics/metrics.hpp"
#include "route/router.hpp"
#include "tls/client_context.hpp"
#include "tls/server_context.hpp"
#include "upstream/registry.hpp"

#include <memory>
#include <vector>

namespace sluice::server {

struct snapshot {
    // `pools`: the running pools of `c` (upstream::registry::build), in its order; empty
    // where none run (--check).
    snapshot(std::shared_ptr<const config::config> c, metrics::registry& m, upstream::pool_list pools = {});
    snapshot(const snapshot&) = delete;  // the router points into policies
    snapshot& operator=(const snapshot&) = delete;

    std::shared_ptr<const config::config> cfg;
    std::vector<limit::policy> policies;
    route::router router;
    identity::clients clients;
    identity::cidr_set proxy_trusted;                 // server.proxy_protocol.trusted (empty when unset)
    identity::cidr_set check_peers;                   // service.http_peers: who may ask the HTTP check
    std::shared_ptr<const tls::server_contexts> tls;  // server.tls's certificates; null without
    std::size_t unmatched_slot = 0;                   // metrics slot for requests no route matches
    std::size_t check_slot = 0;                       // metrics slot for the HTTP check's answers ("(check)")
    std::uint64_t generation = 0;                     // unique per snapshot: caches built for one know they are stale
    upstream::pool_list pools;
    std::size_t default_pool = 0;  // the pool of requests no route matches; pools.size(): none (404)
    // Each pool's TLS context, in config order (null for a pool with no https server):
    // built with each snapshot, so that a reload's files apply to new upstream connections.
    std::vector<std::shared_ptr<const tls::client_context>> upstream_tls;
    // Each pool's in-flight cap (max_in_flight) as a concurrency tier, in config order
    // (limit 0 for a pool without one), and its metric slot (kind "upstream").
    struct pool_cap {
        limit::tier tier;
        std::size_t metric_slot = 0;
    };
    std::vector<pool_cap> pool_caps;
    // service.domains, for the rate-limit service (src/service).
    std::vector<limit::descriptor_domain> domains;
    std::size_t unknown_domain_slot = 0;  // the metric slot of descriptors of a domain not in `domains`
};

}  // namespace sluice::server
