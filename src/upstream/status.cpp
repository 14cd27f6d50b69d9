#include "upstream/status.hpp"

namespace sluice::upstream {

const char* to_string(server_state s) {
    switch (s) {
        case server_state::up: return "up";
        case server_state::down: return "down";
        case server_state::ejected: return "ejected";
        case server_state::slow_start: return "slow_start";
    }
    return "unknown";
}

const char* to_string(config::balance_kind b) {
    switch (b) {
        case config::balance_kind::round_robin: return "round_robin";
        case config::balance_kind::least_request: return "least_request";
        case config::balance_kind::hash: return "hash";
    }
    return "unknown";
}

namespace {

server_status status_of(const server& s, const config::upstream_config& cfg, std::int64_t now) {
    server_status out;
    out.url = (s.url.tls ? "https://" : "http://") + s.url.authority + s.url.base_path;
    out.address = s.address;
    out.label = s.label;
    out.weight = s.weight;
    out.ejections = s.ejections.load(std::memory_order_relaxed);
    out.counts = s.counts.sum();
    // A verdict left from before a reload that turned the checks off is not shown.
    out.last_check_ms = cfg.health.path.empty() ? 0 : s.last_check_ms.load(std::memory_order_relaxed);
    if (out.last_check_ms != 0) out.last_check = s.last_check();
    out.check_passes = s.check_passes.load(std::memory_order_relaxed);
    out.check_failures = s.check_failures.load(std::memory_order_relaxed);
    const auto until = s.ejected_until.load(std::memory_order_relaxed);
    const auto back = s.back_at.load(std::memory_order_relaxed);
    const auto ramp = std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.slow_start).count();
    if (s.checked_down.load(std::memory_order_relaxed)) {
        out.state = server_state::down;
    } else if (until > now) {
        out.state = server_state::ejected;
        out.ejected_for_ms = (until - now + 999'999) / 1'000'000;
    } else if (back != 0 && ramp > 0 && now - back < ramp) {
        out.state = server_state::slow_start;
    }
    return out;
}

}  // namespace

std::vector<pool_status> status_of(const pool_list& pools, clock::time_point at) {
    const auto now = ticks(at);
    std::vector<pool_status> out;
    for (const auto& p : pools) {
        auto& ps = out.emplace_back();
        ps.name = p->name();
        ps.balance = p->cfg().balance;
        ps.max_in_flight = p->cfg().max_in_flight;
        ps.counts = p->counts().sum();
        for (const auto& s : p->current()->servers) ps.servers.push_back(status_of(*s, p->cfg(), now));
    }
    return out;
}

std::vector<metrics::upstream_pool_figures> figures_of(const std::vector<pool_status>& pools) {
    std::vector<metrics::upstream_pool_figures> out;
    for (const auto& p : pools) {
        auto& f = out.emplace_back();
        f.upstream = p.name;
        f.response = p.counts.response;
        f.response_sum_ns = p.counts.response_sum_ns;
        f.retries = p.counts.retries;
        f.budget_exhausted = p.counts.budget_exhausted;
        for (const auto& s : p.servers) {
            auto& sf = f.servers.emplace_back();
            sf.server = s.label;
            sf.up = s.state == server_state::up || s.state == server_state::slow_start;
            sf.requests = s.counts.requests;
            sf.in_flight = s.counts.in_flight;
            sf.ejections = s.ejections;
            sf.errors = s.counts.errors;
        }
    }
    return out;
}

}  // namespace sluice::upstream
