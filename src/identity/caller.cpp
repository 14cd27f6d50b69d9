#include "identity/caller.hpp"

namespace sluice::identity {

clients::clients(const config::clients_config& c, const std::vector<config::policy_config>& policies)
    : cfg(c), trusted(c.trusted_proxies), allow(c.allow), names(names_used(policies)) {
    if (!c.api_key_header.empty() || c.jwt || c.user_certificate != config::clients_config::certificate_name::none)
        users.emplace(c);
}

}  // namespace sluice::identity
