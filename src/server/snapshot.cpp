#include "server/snapshot.hpp"

#include <algorithm>
#include <atomic>

namespace sluice::server {

namespace {

// Each limited node's metric slot: "<domain>\t<kind>".
void assign_slots(metrics::registry& m, const std::string& domain, std::vector<limit::descriptor_node>& nodes) {
    for (auto& n : nodes) {
        if (n.limited()) n.metric_slot = m.slot("descriptor", domain + '\t' + identity::to_string(n.kind));
        assign_slots(m, domain, n.children);
    }
}

std::uint64_t next_generation() {
    static std::atomic<std::uint64_t> last{0};
    return ++last;
}

}  // namespace

snapshot::snapshot(std::shared_ptr<const config::config> c, metrics::registry& m, upstream::pool_list p)
    : cfg(std::move(c)),
      policies(limit::compile_policies(*cfg)),
      router(*cfg, policies),
      clients(cfg->clients, cfg->policies),
      proxy_trusted(cfg->server.proxy_protocol ? identity::cidr_set(cfg->server.proxy_protocol->trusted)
                                               : identity::cidr_set()),
      check_peers(cfg->service.http_peers),
      tls(cfg->server.tls ? std::make_shared<const tls::server_contexts>(*cfg->server.tls) : nullptr),
      unmatched_slot(m.slot("route", "unmatched")),
      check_slot(cfg->service.http_listen ? m.slot("route", "(check)") : unmatched_slot),
      generation(next_generation()),
      pools(std::move(p)),
      domains(limit::compile_domains(*cfg, policies)) {
    const auto* fallback = cfg->find_upstream("");
    default_pool = fallback ? static_cast<std::size_t>(fallback - cfg->upstreams.data()) : cfg->upstreams.size();
    for (const auto& u : cfg->upstreams) {
        const bool https = std::any_of(u.servers.begin(), u.servers.end(), [](const auto& s) { return s.url.tls; });
        upstream_tls.push_back(https ? std::make_shared<const tls::client_context>(u) : nullptr);
        // One counter per pool identifier whatever N or the lease: a reload keeps the slots held.
        config::tier_config t{"upstream", u.max_in_flight, u.max_in_flight_lease, config::algorithm::concurrency};
        auto& cap = pool_caps.emplace_back();
        cap.tier = limit::tier::from(t, "upstream/concurrency", "upstream-concurrency");
        if (u.max_in_flight > 0) cap.metric_slot = m.slot("upstream", u.name);
    }
    for (auto& p : policies) p.metric_slot = m.slot("policy", p.name);
    for (auto& r : router.routes()) r.metric_slot = m.slot("route", r.name);
    for (auto& d : domains) {
        d.unknown_slot = m.slot("descriptor", d.name + "\tunknown");
        assign_slots(m, d.name, d.nodes);
    }
    if (cfg->service.grpc_listen) unknown_domain_slot = m.slot("descriptor", "(unknown)\tunknown");
}

}  // namespace sluice::server
