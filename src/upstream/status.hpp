// What /upstreams and the sluice_upstream_* metrics say of the running pools: each pool's
// current members, their health and what every worker counted for them (the tallies, see
// pool.hpp). Any thread may call these; `pools` is the registry's running set.
#pragma once

#include "metrics/metrics.hpp"
#include "upstream/registry.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::upstream {

// up: available at full weight; slow_start: available, its weight still rising after it came
// back; ejected: out by passive ejection for ejected_for_ms more; down: out by active checks.
enum class server_state { up, down, ejected, slow_start };
const char* to_string(server_state s);
const char* to_string(config::balance_kind b);

struct server_status {
    std::string url;  // as configured, "http://api.internal:8080"
    std::string address;
    std::string label;
    unsigned weight = 1;
    server_state state = server_state::up;
    std::int64_t ejected_for_ms = 0;  // 0 unless ejected
    std::uint64_t ejections = 0;
    server_totals counts;
    // The last active check: when it ended (unix ms; 0: never checked, or no checks), its
    // result ("ok", or why it failed) and the passes or failures in a row.
    std::int64_t last_check_ms = 0;
    std::string last_check;
    std::uint32_t check_passes = 0, check_failures = 0;
};

struct pool_status {
    std::string name;
    config::balance_kind balance = config::balance_kind::round_robin;
    std::int64_t max_in_flight = 0;
    std::vector<server_status> servers;
    pool_totals counts;
};

std::vector<pool_status> status_of(const pool_list& pools, clock::time_point now);
std::vector<metrics::upstream_pool_figures> figures_of(const std::vector<pool_status>& pools);

}  // namespace sluice::upstream
