// config::load_string: any text either loads or throws config_error. Any other exception
// escapes and crashes the fuzzer, which is the report. A loaded config must keep the
// guarantees config.hpp states.
#include "check.hpp"
#include "config/config.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

using namespace sluice::config;
using sluice::fuzz::check;

namespace {

void check_tier(const tier_config& t) {
    check(t.limit >= 1 && t.per.count() > 0 && t.min_interval.count() >= 0, "tier limit/per/min_interval");
    if (t.algo == algorithm::sliding)
        check(t.precision.count() > 0 && t.per % t.precision == duration(0) && t.per / t.precision <= 120,
              "sliding precision");
    if (t.algo == algorithm::fixed) check(t.precision == t.per, "fixed precision");
    if (t.algo == algorithm::gcra) check(t.burst >= 1, "gcra burst");
    if (t.algo == algorithm::log) check(t.limit <= 1000, "log limit");
}

void check_config(const config& c) {
    check(c.clients.ipv6_prefix >= 1 && c.clients.ipv6_prefix <= 128, "ipv6_prefix");
    for (const auto& p : c.policies)
        for (const auto* tiers : {&p.ip, &p.user})
            for (const auto& t : *tiers) check_tier(t);
    for (const auto& r : c.routes) {
        check(r.path.empty() != r.path_prefix.empty(), "route needs exactly one of path, path_prefix");
        check(r.cost >= 1, "route cost");
        check(std::none_of(r.host.begin(), r.host.end(), [](unsigned char ch) { return std::isupper(ch); }),
              "route host not lower case");
        if (r.policy == "none") continue;
        const policy_config* p = c.find_policy(r.policy);
        check(p != nullptr, "route names an unknown policy");
        for (const auto* tiers : {&p->ip, &p->user})
            for (const auto& t : *tiers)
                check(r.cost <= t.limit && (t.algo != algorithm::gcra || r.cost <= t.burst), "route cost over a tier");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view yaml(reinterpret_cast<const char*>(data), size);
    try {
        check_config(*load_string(yaml, "fuzz.yaml"));
    } catch (const config_error&) {
    }
    return 0;
}
