#include "limit/rules.hpp"

#include <boost/beast/core/string.hpp>

namespace sluice::limit {

using boost::beast::iequals;

void rules::build(const config::config& c) {
    policies_.reserve(c.policies.size());
    for (const auto& pc : c.policies) {
        policy p{pc.name, pc.shadow, {}, {}, 0};
        for (const auto& t : pc.ip) p.ip.push_back(tier::from(t));
        for (const auto& t : pc.user) p.user.push_back(tier::from(t));
        policies_.push_back(std::move(p));
    }
    for (const auto& rc : c.routes) {
        route r{rc.name, rc.path, rc.path_prefix, rc.methods, rc.host, nullptr, rc.cost, 0};
        for (const auto& p : policies_)
            if (p.name == rc.policy) r.limits = &p;
        routes_.push_back(std::move(r));
    }
}

std::string_view target_path(std::string_view target) {
    if (!target.empty() && target.front() != '/') {
        // absolute-form: scheme://authority/path
        auto scheme = target.find("://");
        if (scheme == std::string_view::npos) return target.substr(0, target.find('?'));
        auto slash = target.find('/', scheme + 3);
        target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
    }
    return target.substr(0, target.find('?'));
}

const route* rules::match(std::string_view method, std::string_view host, std::string_view target) const {
    const auto path = target_path(target);
    // Host without its port; IPv6 literals keep their brackets.
    auto colon = host.rfind(':');
    if (colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos) host = host.substr(0, colon);
    for (const auto& r : routes_) {
        if (!r.path.empty() ? path != r.path : path.substr(0, r.path_prefix.size()) != r.path_prefix) continue;
        if (!r.host.empty() && !iequals(host, r.host)) continue;
        if (!r.methods.empty()) {
            bool any = false;
            for (const auto& m : r.methods) any = any || m == method;
            if (!any) continue;
        }
        return &r;
    }
    return nullptr;
}

}  // namespace sluice::limit
