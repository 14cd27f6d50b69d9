#include "server/snapshot.hpp"

#include <atomic>

namespace sluice::server {

namespace {

std::uint64_t next_generation() {
    static std::atomic<std::uint64_t> last{0};
    return ++last;
}

}  // namespace

snapshot::snapshot(std::shared_ptr<const config::config> c, metrics::registry& m)
    : cfg(std::move(c)),
      policies(limit::compile_policies(*cfg)),
      router(*cfg, policies),
      clients(cfg->clients),
      proxy_trusted(cfg->server.proxy_protocol ? identity::cidr_set(cfg->server.proxy_protocol->trusted)
                                               : identity::cidr_set()),
      tls(cfg->server.tls ? std::make_shared<const tls::server_contexts>(*cfg->server.tls) : nullptr),
      unmatched_slot(m.slot("route", "unmatched")),
      generation(next_generation()),
      upstream_tls(cfg->upstreams.front().url.tls ? std::make_shared<const tls::client_context>(cfg->upstreams.front())
                                                  : nullptr) {
    for (auto& p : policies) p.metric_slot = m.slot("policy", p.name);
    for (auto& r : router.routes()) r.metric_slot = m.slot("route", r.name);
}

}  // namespace sluice::server
