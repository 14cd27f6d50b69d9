// Routes compiled from a config snapshot: which policy, cost and name a request gets.
//
// Thread: immutable after construction; shared by every worker.
#pragma once

#include "config/config.hpp"
#include "limit/policy.hpp"
#include "route/target.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::route {

struct route {
    std::string name;
    std::string path;         // exact (also matches one trailing slash more), or
    std::string path_prefix;  // a plain prefix of the match path ("/api" matches "/apix")
    std::vector<std::string> methods;
    std::string host;
    bool case_insensitive = false;          // path and path_prefix are then lower case
    const limit::policy* limits = nullptr;  // null: unlimited
    std::int64_t cost = 1;
    std::string cost_header;                      // the upstream reports the request's whole cost here ("" = none)
    std::int64_t max_cost = 0;                    // the most a report is taken as
    std::optional<config::charge_config> charge;  // unset: every admitted request is charged
    // Some route under the same policy settles its charge at the response (charge or
    // cost_header): the policy's counts may be given back, so its denials are not cached.
    bool policy_settles = false;
    std::size_t metric_slot = 0;  // index for per-route metrics
    std::size_t upstream = 0;     // its pool: an index into config::upstreams
};

class router {
public:
    // Routes refer to `policies`, which must outlive the router.
    router(const config::config& c, const std::vector<limit::policy>& policies);

    // The first route matching a parsed target; null when none does (then nothing is
    // limited). The host is the absolute-form authority's if any, else `host_header`'s
    // without its port. Paths compare against `t.match_path`; an asterisk-form target
    // matches only catch-all routes (path_prefix "/"); an authority-form one matches none.
    const route* match(std::string_view method, std::string_view host_header, const request_target& t) const;
    std::vector<route>& routes() { return routes_; }
    const std::vector<route>& routes() const { return routes_; }

private:
    std::vector<route> routes_;
};

}  // namespace sluice::route
