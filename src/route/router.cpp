#include "route/router.hpp"

#include "base/text.hpp"

#include <boost/beast/core/string.hpp>

namespace sluice::route {

namespace {

using boost::beast::iequals;

using base::ascii_lower;

std::string lower_case(std::string s) {
    for (char& c : s) c = ascii_lower(c);
    return s;
}

// Whether `path` starts with `prefix`. With `fold`, `prefix` is already lower case and
// `path` is lower-cased as it is compared.
bool starts_with(std::string_view path, std::string_view prefix, bool fold) {
    if (path.size() < prefix.size()) return false;
    if (!fold) return path.compare(0, prefix.size(), prefix) == 0;
    for (std::size_t i = 0; i < prefix.size(); ++i)
        if (ascii_lower(path[i]) != prefix[i]) return false;
    return true;
}

bool path_matches(const route& r, const request_target& t) {
    if (t.form == target_form::asterisk) return r.path.empty() && r.path_prefix == "/";
    const std::string_view p = t.match_path;
    if (r.path.empty()) return starts_with(p, r.path_prefix, r.case_insensitive);
    // Exact, or exact plus one trailing slash: "/login/" is "/login" to most upstreams.
    const bool one_more_slash = p.size() == r.path.size() + 1 && p.back() == '/';
    if (p.size() != r.path.size() && !one_more_slash) return false;
    return starts_with(p, r.path, r.case_insensitive);
}

// Host without its port; IPv6 literals keep their brackets.
std::string_view without_port(std::string_view host) {
    const auto colon = host.rfind(':');
    if (colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos)
        host = host.substr(0, colon);
    // "api.example.com." names the same host as "api.example.com" (the root label).
    if (!host.empty() && host.back() == '.') host.remove_suffix(1);
    return host;
}

// A route's path must be one a request can meet: already in the normal form of targets.
// Config loading records where the path stands; the check is the router's own.
void check_normal_form(const config::route_config& rc) {
    const std::string& path = rc.path.empty() ? rc.path_prefix : rc.path;
    const std::string at = rc.path_at.empty() ? "routes: \"" : rc.path_at + ": \"";
    request_target t;
    if (const char* why = parse_target("GET", path, t))
        throw config::config_error(at + path + "\" is not a valid path: " + why);
    if (t.match_path != path)
        throw config::config_error(at + path + "\" is not a normalised path (did you mean \"" + t.match_path + "\"?)");
}

}  // namespace

router::router(const config::config& c, const std::vector<limit::policy>& policies) {
    for (const auto& rc : c.routes) {
        check_normal_form(rc);
        route r;
        r.name = rc.name;
        r.case_insensitive = rc.case_insensitive;
        r.path = rc.case_insensitive ? lower_case(rc.path) : rc.path;
        r.path_prefix = rc.case_insensitive ? lower_case(rc.path_prefix) : rc.path_prefix;
        r.methods = rc.methods;
        r.host = rc.host;
        r.cost = rc.cost;
        r.cost_header = rc.cost_header;
        r.max_cost = rc.max_cost;
        r.charge = rc.charge;
        if (const auto* u = c.find_upstream(rc.upstream)) r.upstream = static_cast<std::size_t>(u - c.upstreams.data());
        for (const auto& p : policies)
            if (p.name == rc.policy) r.limits = &p;
        routes_.push_back(std::move(r));
    }
    for (auto& r : routes_)
        for (const auto& other : routes_)
            if (r.limits && other.limits == r.limits && (other.charge || !other.cost_header.empty()))
                r.policy_settles = true;
}

const route* router::match(std::string_view method, std::string_view host_header, const request_target& t) const {
    if (t.form == target_form::authority) return nullptr;
    const std::string_view host =
        t.form == target_form::absolute ? std::string_view(t.host) : without_port(host_header);
    for (const auto& r : routes_) {
        if (!path_matches(r, t)) continue;
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

}  // namespace sluice::route
