// Policies and routes compiled from a config snapshot: which limits apply to a request.
//
// Thread: immutable after construction; shared by every worker.
#pragma once

#include "config/config.hpp"
#include "limit/decide.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sluice::limit {

struct policy {
    std::string name;
    bool shadow = false;
    std::vector<tier> ip, user;
    std::size_t metric_slot = 0;  // index for per-policy metrics
};

struct route {
    std::string name;
    std::string path;         // exact, or
    std::string path_prefix;  // prefix
    std::vector<std::string> methods;
    std::string host;
    const policy* limits = nullptr;  // null: unlimited
    std::int64_t cost = 1;
    std::size_t metric_slot = 0;  // index for per-route metrics
};

class rules {
public:
    // slot_of(kind, name) names a metrics slot for each route ("route") and policy ("policy").
    template <class SlotOf>
    rules(const config::config& c, SlotOf&& slot_of) {
        build(c);
        for (auto& p : policies_) p.metric_slot = slot_of("policy", p.name);
        for (auto& r : routes_) r.metric_slot = slot_of("route", r.name);
    }
    explicit rules(const config::config& c) { build(c); }

    // The first route matching; null when none does (then nothing is limited).
    const route* match(std::string_view method, std::string_view host, std::string_view target) const;
    const std::vector<policy>& policies() const { return policies_; }
    const std::vector<route>& routes() const { return routes_; }

private:
    void build(const config::config& c);
    std::vector<policy> policies_;
    std::vector<route> routes_;
};

// The path of a request target: origin-form up to '?', or the path of an absolute-form URI.
std::string_view target_path(std::string_view target);

}  // namespace sluice::limit
