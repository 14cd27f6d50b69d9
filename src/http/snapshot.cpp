#include "http/snapshot.hpp"

namespace sluice::http {

snapshot::snapshot(std::shared_ptr<const config::config> c, metrics::registry& m)
    : cfg(std::move(c)),
      rules(*cfg, [&m](std::string_view kind, const std::string& name) { return m.slot(kind, name); }),
      trusted(cfg->clients.trusted_proxies),
      allow(cfg->clients.allow),
      unmatched_slot(m.slot("route", "unmatched")) {
    if (!cfg->clients.api_key_header.empty() || cfg->clients.jwt) users.emplace(cfg->clients);
}

}  // namespace sluice::http
