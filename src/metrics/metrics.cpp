#include "metrics/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <limits>
#include <sstream>

namespace sluice::metrics {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

const char* to_string(upstream_error e) {
    switch (e) {
        case upstream_error::connect_timeout: return "connect_timeout";
        case upstream_error::connect_refused: return "connect_refused";
        case upstream_error::connect_failed: return "connect_failed";
        case upstream_error::tls: return "tls";
        case upstream_error::timeout: return "timeout";
        case upstream_error::reset: return "reset";
        case upstream_error::count_: break;
    }
    return "unknown";
}

const char* server_error_name(std::size_t kind) {
    return kind == server_error_5xx ? "5xx" : to_string(static_cast<upstream_error>(kind));
}

const char* to_string(settlement s) {
    switch (s) {
        case settlement::charged: return "charged";
        case settlement::refunded: return "refunded";
        case settlement::raised: return "raised";
        case settlement::failed: return "failed";
        case settlement::count_: break;
    }
    return "";
}

const char* to_string(decision_result r) {
    switch (r) {
        case decision_result::allowed: return "allowed";
        case decision_result::limited: return "limited";
        case decision_result::shadow_limited: return "shadow_limited";
        case decision_result::count_: break;
    }
    return "unknown";
}

const char* to_string(listener l) {
    switch (l) {
        case listener::proxy: return "proxy";
        case listener::check: return "check";
        case listener::count_: break;
    }
    return "unknown";
}

const char* to_string(tls_result r) {
    switch (r) {
        case tls_result::ok: return "ok";
        case tls_result::failed: return "failed";
        case tls_result::timeout: return "timeout";
        case tls_result::refused: return "refused";
        case tls_result::count_: break;
    }
    return "unknown";
}

const char* to_string(tls_version v) {
    switch (v) {
        case tls_version::tls1_2: return "TLSv1.2";
        case tls_version::tls1_3: return "TLSv1.3";
        case tls_version::none: return "none";
        case tls_version::count_: break;
    }
    return "unknown";
}

const char* to_string(rls_call c) {
    switch (c) {
        case rls_call::ok: return "ok";
        case rls_call::over_limit: return "over_limit";
        case rls_call::invalid_argument: return "invalid_argument";
        case rls_call::deadline_exceeded: return "deadline_exceeded";
        case rls_call::cancelled: return "cancelled";
        case rls_call::resource_exhausted: return "resource_exhausted";
        case rls_call::internal: return "internal";
        case rls_call::count_: break;
    }
    return "unknown";
}

const char* to_string(rls_descriptor d) {
    switch (d) {
        case rls_descriptor::allowed: return "allowed";
        case rls_descriptor::limited: return "limited";
        case rls_descriptor::shadow_limited: return "shadow_limited";
        case rls_descriptor::unknown: return "unknown";
        case rls_descriptor::unknown_key: return "unknown_key";
        case rls_descriptor::no_plan: return "no_plan";
        case rls_descriptor::count_: break;
    }
    return "unknown";
}

const char* to_string(proxy_refusal r) {
    switch (r) {
        case proxy_refusal::untrusted: return "untrusted";
        case proxy_refusal::malformed: return "malformed";
        case proxy_refusal::timeout: return "timeout";
        case proxy_refusal::closed: return "closed";
        case proxy_refusal::count_: break;
    }
    return "unknown";
}

void shard::request_done(std::size_t route, unsigned status, double seconds) {
    std::size_t cls = status >= 100 && status < 600 ? status / 100 - 1 : 4;
    requests_[route * classes + cls].add();
    duration_.observe(duration_buckets, seconds);
}

registry::registry(std::size_t workers) : extra_(std::make_shared<prometheus::Registry>()) {
    for (std::size_t i = 0; i < workers; ++i) shards_.push_back(std::make_unique<shard>());
    auto& info = prometheus::BuildGauge()
                     .Name("sluice_build_info")
                     .Help("Always 1; the version label says which build is running.")
                     .Register(*extra_);
    info.Add({{"version", SLUICE_VERSION}}).Set(1);
    reloads_ = &prometheus::BuildCounter()
                    .Name("sluice_config_reloads_total")
                    .Help("Configuration reloads (SIGHUP or POST /reload), by result.")
                    .Register(*extra_);
    admin_actions_ = &prometheus::BuildCounter()
                          .Name("sluice_admin_actions_total")
                          .Help("Admin API actions answered (identities read or reset, blocks, overrides), by action.")
                          .Register(*extra_);
    admin_unauthorized_ = &prometheus::BuildCounter()
                               .Name("sluice_admin_unauthorized_total")
                               .Help("Admin requests refused 401: no bearer token, or another than admin.token_file's.")
                               .Register(*extra_)
                               .Add({});
}

void registry::reloaded(bool ok) { reloads_->Add({{"result", ok ? "ok" : "error"}}).Increment(); }

void registry::admin_action(std::string_view action) {
    admin_actions_->Add({{"action", std::string(action)}}).Increment();
}

void registry::admin_unauthorized() { admin_unauthorized_->Increment(); }

void registry::add_controls(std::function<std::pair<std::size_t, std::size_t>()> counts) {
    auto collect = [counts = std::move(counts)] {
        std::vector<prometheus::MetricFamily> out(1);
        out[0] = {"sluice_admin_controls",
                  "Blocks and overrides the admin API set that are in effect now, by type.",
                  MetricType::Gauge,
                  {}};
        const auto [blocks, overrides] = counts();
        for (const auto& [type, n] : {std::pair{"block", blocks}, std::pair{"override", overrides}}) {
            auto& m = out[0].metric.emplace_back();
            m.label.push_back({"type", type});
            m.gauge.value = static_cast<double>(n);
        }
        return out;
    };
    std::lock_guard lock(names_mu_);
    collectors_.push_back(std::move(collect));
}

std::size_t registry::slot(std::string_view kind, const std::string& name) {
    std::lock_guard lock(names_mu_);
    auto& names = kind == "route"        ? routes_
                  : kind == "upstream"   ? upstreams_
                  : kind == "descriptor" ? descriptors_
                                         : policies_;
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return i;
    if (names.size() + 1 >= max_slots) {
        if (names.size() + 1 == max_slots) names.push_back("other");
        return max_slots - 1;
    }
    names.push_back(name);
    return names.size() - 1;
}

void registry::set_store_gauges(std::function<std::size_t()> keys_held, std::function<std::uint64_t()> evictions) {
    std::lock_guard lock(names_mu_);
    keys_held_ = std::move(keys_held);
    evictions_ = std::move(evictions);
}

void registry::add_redis(std::vector<const redis_counters*> stores, std::function<std::size_t()> connected) {
    auto collect = [stores = std::move(stores), connected = std::move(connected)] {
        using prometheus::MetricType;
        std::vector<prometheus::MetricFamily> out;
        auto add = [&](const char* name, const char* help, MetricType type, double value) {
            prometheus::MetricFamily f{name, help, type, {}};
            prometheus::ClientMetric m;
            (type == MetricType::Counter ? m.counter.value : m.gauge.value) = value;
            f.metric.push_back(m);
            out.push_back(std::move(f));
        };
        auto sum = [&](cell redis_counters::*c) {
            std::uint64_t total = 0;
            for (const auto* s : stores) total += (s->*c).get();
            return static_cast<double>(total);
        };
        using rc = redis_counters;
        add("sluice_redis_commands_total", "Commands written to Redis.", MetricType::Counter, sum(&rc::commands));
        add("sluice_redis_writes_total",
            "Socket writes to Redis; commands_total / writes_total is the pipelining factor.", MetricType::Counter,
            sum(&rc::writes));
        add("sluice_redis_checks_total",
            "Rate-limit checks sent in batches (one node; a cluster: those with one identifier); checks_total / "
            "commands_total is the checks per EVALSHA.",
            MetricType::Counter, sum(&rc::checks));
        add("sluice_redis_deny_cache_hits_total", "Requests answered 429 by a worker's local deny cache.",
            MetricType::Counter, sum(&rc::deny_cache_hits));
        add("sluice_redis_deny_cache_entries", "Entries in the local deny caches.", MetricType::Gauge,
            sum(&rc::deny_cache_size));
        add("sluice_redis_timeouts_total", "Redis calls that reached store.redis.timeout.", MetricType::Counter,
            sum(&rc::timeouts));
        add("sluice_redis_errors_total", "Rate-limit checks that failed in the Redis store (timeouts included).",
            MetricType::Counter, sum(&rc::errors));
        add("sluice_redis_reconnects_total", "Connections to Redis established after the first.", MetricType::Counter,
            sum(&rc::reconnects));
        add("sluice_redis_noscript_reloads_total", "Script reloads after a NOSCRIPT reply.", MetricType::Counter,
            sum(&rc::noscript_reloads));
        add("sluice_redis_connections_lost_total", "Connections to Redis lost (closed, I/O error, stalled).",
            MetricType::Counter, sum(&rc::connection_lost));
        add("sluice_redis_redirects_total", "Redis Cluster MOVED and ASK replies followed.", MetricType::Counter,
            sum(&rc::redirects));
        add("sluice_redis_slot_map_refreshes_total", "Redis Cluster slot maps read.", MetricType::Counter,
            sum(&rc::slot_refreshes));
        add("sluice_redis_undos_total",
            "Redis Cluster commits taken back because another node denied the same request.", MetricType::Counter,
            sum(&rc::undos));
        add("sluice_redis_connected", "Workers whose Redis connection is ready.", MetricType::Gauge,
            static_cast<double>(connected()));
        return out;
    };
    std::lock_guard lock(names_mu_);
    collectors_.push_back(std::move(collect));
}

void registry::add_fallback(std::vector<const fallback_counters*> stores, std::function<bool()> degraded) {
    auto collect = [stores = std::move(stores), degraded = std::move(degraded)] {
        std::vector<prometheus::MetricFamily> out(2);
        out[0] = {"sluice_store_degraded",
                  "1 while the shared store does not answer and store.on_error local decides on this gateway's "
                  "memory store with limits divided by store.fleet_size.",
                  MetricType::Gauge,
                  {}};
        out[0].metric.emplace_back().gauge.value = degraded() ? 1 : 0;
        std::uint64_t local = 0;
        for (const auto* s : stores) local += s->local_decisions.get();
        out[1] = {"sluice_store_local_decisions_total",
                  "Rate-limit checks decided on the local memory store because the shared store did not answer.",
                  MetricType::Counter,
                  {}};
        out[1].metric.emplace_back().counter.value = static_cast<double>(local);
        return out;
    };
    std::lock_guard lock(names_mu_);
    collectors_.push_back(std::move(collect));
}

void registry::add_limited_identities(std::function<std::size_t()> count) {
    auto collect = [count = std::move(count)] {
        std::vector<prometheus::MetricFamily> out(1);
        out[0] = {"sluice_limited_identities",
                  "Distinct identities (per policy) refused at least once in the last minute, as GET /top counts them.",
                  MetricType::Gauge,
                  {}};
        out[0].metric.emplace_back().gauge.value = static_cast<double>(count());
        return out;
    };
    std::lock_guard lock(names_mu_);
    collectors_.push_back(std::move(collect));
}

void registry::add_kind_evictions(std::function<std::vector<std::pair<std::string, std::uint64_t>>()> by_kind) {
    auto collect = [by_kind = std::move(by_kind)] {
        std::vector<prometheus::MetricFamily> out(1);
        out[0] = {"sluice_store_kind_evictions_total",
                  "Identifiers the memory store evicted because their kind's policies.<name>.max_values was reached, "
                  "by kind.",
                  MetricType::Counter,
                  {}};
        for (const auto& [kind, n] : by_kind()) {
            auto& m = out[0].metric.emplace_back();
            m.label = {{"kind", kind}};
            m.counter.value = static_cast<double>(n);
        }
        return out;
    };
    std::lock_guard lock(names_mu_);
    collectors_.push_back(std::move(collect));
}

void registry::add_access_log(std::function<std::uint64_t()> dropped) {
    auto collect = [dropped = std::move(dropped)] {
        std::vector<prometheus::MetricFamily> out(1);
        out[0] = {"sluice_access_log_dropped_total",
                  "Access log lines lost: dropped while the log's writer fell behind, or in a failed write.",
                  MetricType::Counter,
                  {}};
        out[0].metric.emplace_back().counter.value = static_cast<double>(dropped());
        return out;
    };
    std::lock_guard lock(names_mu_);
    collectors_.push_back(std::move(collect));
}

void registry::add_upstreams(std::function<std::vector<upstream_pool_figures>()> pools) {
    auto collect = [pools = std::move(pools)] {
        std::vector<MetricFamily> out(8);
        out[0] = {"sluice_upstream_requests_total",
                  "Attempts sent to each upstream server (a retry is one more), by pool and server.",
                  MetricType::Counter,
                  {}};
        out[1] = {"sluice_upstream_server_errors_total",
                  "Failed attempts on each upstream server, by pool, server and kind (5xx: an answer with such a "
                  "status).",
                  MetricType::Counter,
                  {}};
        out[2] = {"sluice_upstream_server_up",
                  "1 while an upstream server is available, 0 while an active check has it down or passive ejection "
                  "has it out.",
                  MetricType::Gauge,
                  {}};
        out[3] = {
            "sluice_upstream_ejections_total", "Passive ejections of each upstream server.", MetricType::Counter, {}};
        out[4] = {
            "sluice_upstream_in_flight", "Requests in flight to each upstream server now.", MetricType::Gauge, {}};
        out[5] = {"sluice_upstream_response_seconds",
                  "Time from a request sent to an upstream server to its response head, by pool.",
                  MetricType::Histogram,
                  {}};
        out[6] = {"sluice_upstream_retries_total",
                  "Requests sent again to another server of the pool after a failure.",
                  MetricType::Counter,
                  {}};
        out[7] = {"sluice_upstream_retry_budget_exhausted_total",
                  "Retries the pool's retry budget refused (the failure was answered as is).",
                  MetricType::Counter,
                  {}};
        for (const auto& p : pools()) {
            for (const auto& s : p.servers) {
                const std::vector<ClientMetric::Label> at{{"upstream", p.upstream}, {"server", s.server}};
                auto& requests = out[0].metric.emplace_back();
                requests.label = at;
                requests.counter.value = static_cast<double>(s.requests);
                for (std::size_t k = 0; k < server_error_kinds; ++k) {
                    auto& e = out[1].metric.emplace_back();
                    e.label = at;
                    e.label.push_back({"kind", server_error_name(k)});
                    e.counter.value = static_cast<double>(s.errors[k]);
                }
                auto& up = out[2].metric.emplace_back();
                up.label = at;
                up.gauge.value = s.up ? 1 : 0;
                auto& ejections = out[3].metric.emplace_back();
                ejections.label = at;
                ejections.counter.value = static_cast<double>(s.ejections);
                auto& in_flight = out[4].metric.emplace_back();
                in_flight.label = at;
                // Summed over workers a gauge can be momentarily negative as a wrapped unsigned.
                in_flight.gauge.value = static_cast<double>(static_cast<std::int64_t>(s.in_flight));
            }
            const std::vector<ClientMetric::Label> at{{"upstream", p.upstream}};
            auto& h = out[5].metric.emplace_back();
            h.label = at;
            std::uint64_t cumulative = 0;
            for (std::size_t b = 0; b < p.response.size(); ++b) {
                cumulative += p.response[b];
                const double bound =
                    b < duration_buckets.size() ? duration_buckets[b] : std::numeric_limits<double>::infinity();
                h.histogram.bucket.push_back({cumulative, bound});
            }
            h.histogram.sample_count = cumulative;
            h.histogram.sample_sum = static_cast<double>(p.response_sum_ns) / 1e9;
            auto& retries = out[6].metric.emplace_back();
            retries.label = at;
            retries.counter.value = static_cast<double>(p.retries);
            auto& exhausted = out[7].metric.emplace_back();
            exhausted.label = at;
            exhausted.counter.value = static_cast<double>(p.budget_exhausted);
        }
        return out;
    };
    std::lock_guard lock(names_mu_);
    collectors_.push_back(std::move(collect));
}

namespace {

MetricFamily family(std::string name, std::string help, MetricType type) {
    MetricFamily f;
    f.name = std::move(name);
    f.help = std::move(help);
    f.type = type;
    return f;
}

ClientMetric counter(std::vector<ClientMetric::Label> labels, std::uint64_t v) {
    ClientMetric m;
    m.label = std::move(labels);
    m.counter.value = static_cast<double>(v);
    return m;
}

ClientMetric gauge(std::int64_t v) {
    ClientMetric m;
    m.gauge.value = static_cast<double>(v);
    return m;
}

template <std::size_t N>
ClientMetric histogram(const std::vector<std::unique_ptr<shard>>& shards, histogram_cells<N> shard::*member,
                       const std::array<double, N>& bounds) {
    ClientMetric h;
    std::uint64_t cumulative = 0, sum_ns = 0;
    for (std::size_t b = 0; b <= N; ++b) {
        for (const auto& s : shards) cumulative += ((*s).*member).counts[b].get();
        double bound = b < N ? bounds[b] : std::numeric_limits<double>::infinity();
        h.histogram.bucket.push_back({cumulative, bound});
    }
    for (const auto& s : shards) sum_ns += ((*s).*member).sum_ns.get();
    h.histogram.sample_count = cumulative;
    h.histogram.sample_sum = static_cast<double>(sum_ns) / 1e9;
    return h;
}

}  // namespace

void registry::set_certificates(std::vector<std::pair<std::string, std::int64_t>> certs) {
    std::lock_guard lock(names_mu_);
    certificates_ = std::move(certs);
}

std::string registry::scrape() const {
    static const char* class_names[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
    std::vector<MetricFamily> out = extra_->Collect();
    std::lock_guard lock(names_mu_);
    auto total = [this](cell shard::*member) {
        std::uint64_t sum = 0;
        for (const auto& s : shards_) sum += ((*s).*member).get();
        return sum;
    };

    auto requests =
        family("sluice_requests_total", "Requests answered, by route and status class.", MetricType::Counter);
    for (std::size_t r = 0; r < routes_.size(); ++r)
        for (std::size_t c = 0; c < shard::classes; ++c) {
            std::uint64_t sum = 0;
            for (const auto& s : shards_) sum += s->requests_[r * shard::classes + c].get();
            requests.metric.push_back(counter({{"route", routes_[r]}, {"status", class_names[c]}}, sum));
        }
    out.push_back(std::move(requests));

    auto duration =
        family("sluice_request_duration_seconds",
               "Time from the first byte of a request to the last byte of its response.", MetricType::Histogram);
    duration.metric.push_back(histogram(shards_, &shard::duration_, duration_buckets));
    out.push_back(std::move(duration));

    constexpr auto results = static_cast<std::size_t>(decision_result::count_);
    auto decisions = family("sluice_rate_limit_decisions_total",
                            "Rate-limit decisions, by policy, result (shadow_limited: a shadow policy "
                            "would have rejected) and listener (proxy, or check: the HTTP check).",
                            MetricType::Counter);
    for (std::size_t l = 0; l < static_cast<std::size_t>(listener::count_); ++l)
        for (std::size_t p = 0; p < policies_.size(); ++p)
            for (std::size_t r = 0; r < results; ++r) {
                std::uint64_t sum = 0;
                for (const auto& s : shards_) sum += s->decisions_[(l * max_slots + p) * results + r].get();
                // The check's series only once it has decided: a gateway without one shows none.
                if (l != 0 && sum == 0) continue;
                decisions.metric.push_back(counter({{"policy", policies_[p]},
                                                    {"result", to_string(static_cast<decision_result>(r))},
                                                    {"listener", to_string(static_cast<listener>(l))}},
                                                   sum));
            }
    out.push_back(std::move(decisions));

    constexpr auto settled = static_cast<std::size_t>(settlement::count_);
    auto settlements = family("sluice_charge_settlements_total",
                              "Charges settled at the response on routes with charge or cost_header, by policy and "
                              "result (charged: kept as reserved; refunded: some or all given back; raised: more "
                              "charged; failed: the store failed, the charge stood).",
                              MetricType::Counter);
    for (std::size_t p = 0; p < policies_.size(); ++p)
        for (std::size_t r = 0; r < settled; ++r) {
            std::uint64_t sum = 0;
            for (const auto& s : shards_) sum += s->settlements_[p * settled + r].get();
            settlements.metric.push_back(
                counter({{"policy", policies_[p]}, {"result", to_string(static_cast<settlement>(r))}}, sum));
        }
    out.push_back(std::move(settlements));

    auto store_duration = family("sluice_store_call_duration_seconds", "Time a rate-limit decision took in the store.",
                                 MetricType::Histogram);
    store_duration.metric.push_back(histogram(shards_, &shard::store_duration_, store_buckets));
    out.push_back(std::move(store_duration));

    auto store_errors =
        family("sluice_store_errors_total", "Store calls that failed or timed out (then store.on_error applied).",
               MetricType::Counter);
    store_errors.metric.push_back(counter({}, total(&shard::store_errors_)));
    out.push_back(std::move(store_errors));

    auto unauthorized = family("sluice_unauthorized_total",
                               "Requests answered 401: credentials invalid, or missing where the key registry "
                               "requires a known key.",
                               MetricType::Counter);
    unauthorized.metric.push_back(counter({}, total(&shard::unauthorized_)));
    out.push_back(std::move(unauthorized));

    auto forbidden = family("sluice_forbidden_total",
                            "Requests answered 403: the caller's plan is not configured, or there is none and no "
                            "default_plan.",
                            MetricType::Counter);
    forbidden.metric.push_back(counter({}, total(&shard::forbidden_)));
    out.push_back(std::move(forbidden));

    auto blocked = family("sluice_blocked_total",
                          "Requests answered 429 because the operator blocked their caller (admin API), by policy.",
                          MetricType::Counter);
    for (std::size_t p = 0; p < policies_.size(); ++p) {
        std::uint64_t sum = 0;
        for (const auto& s : shards_) sum += s->blocked_[p].get();
        blocked.metric.push_back(counter({{"policy", policies_[p]}}, sum));
    }
    out.push_back(std::move(blocked));

    auto keys =
        family("sluice_store_keys", "Identifiers whose limit state the memory store holds now.", MetricType::Gauge);
    keys.metric.push_back(gauge(keys_held_ ? static_cast<std::int64_t>(keys_held_()) : 0));
    out.push_back(std::move(keys));
    auto evicted =
        family("sluice_store_evictions_total",
               "Identifiers the memory store evicted because store.memory.max_keys was reached.", MetricType::Counter);
    evicted.metric.push_back(counter({}, evictions_ ? evictions_() : 0));
    out.push_back(std::move(evicted));

    auto errors = family("sluice_upstream_errors_total", "Failed upstream exchanges, by kind.", MetricType::Counter);
    for (std::size_t k = 0; k < static_cast<std::size_t>(upstream_error::count_); ++k) {
        std::uint64_t sum = 0;
        for (const auto& s : shards_) sum += s->upstream_errors_[k].get();
        errors.metric.push_back(counter({{"kind", to_string(static_cast<upstream_error>(k))}}, sum));
    }
    out.push_back(std::move(errors));

    auto open = family("sluice_client_connections", "Client connections open now.", MetricType::Gauge);
    // Summed over shards a gauge can be momentarily negative as a wrapped unsigned.
    open.metric.push_back(gauge(static_cast<std::int64_t>(total(&shard::open_connections_))));
    out.push_back(std::move(open));
    auto leases = family("sluice_concurrency_slots_held",
                         "Requests in flight on this gateway holding concurrency slots (tiers {concurrency: N}).",
                         MetricType::Gauge);
    leases.metric.push_back(gauge(static_cast<std::int64_t>(total(&shard::leases_held_))));
    out.push_back(std::move(leases));
    auto rejected =
        family("sluice_client_connections_rejected_total",
               "Client connections closed at once because server.max_connections was reached.", MetricType::Counter);
    rejected.metric.push_back(counter({}, total(&shard::rejected_connections_)));
    out.push_back(std::move(rejected));
    auto proxy_refused = family("sluice_proxy_protocol_refused_total",
                                "Client connections closed unanswered before a PROXY protocol header was read "
                                "(server.proxy_protocol), by reason.",
                                MetricType::Counter);
    for (std::size_t k = 0; k < static_cast<std::size_t>(proxy_refusal::count_); ++k) {
        std::uint64_t sum = 0;
        for (const auto& s : shards_) sum += s->proxy_refused_[k].get();
        proxy_refused.metric.push_back(counter({{"reason", to_string(static_cast<proxy_refusal>(k))}}, sum));
    }
    out.push_back(std::move(proxy_refused));
    constexpr auto versions = static_cast<std::size_t>(tls_version::count_);
    auto handshakes = family("sluice_tls_handshakes_total",
                             "TLS handshakes on the listener, by result (refused: over server.tls.max_handshakes) "
                             "and protocol version (none: no version was agreed).",
                             MetricType::Counter);
    for (std::size_t r = 0; r < static_cast<std::size_t>(tls_result::count_); ++r)
        for (std::size_t v = 0; v < versions; ++v) {
            std::uint64_t sum = 0;
            for (const auto& s : shards_) sum += s->handshakes_[r * versions + v].get();
            handshakes.metric.push_back(counter({{"result", to_string(static_cast<tls_result>(r))},
                                                 {"version", to_string(static_cast<tls_version>(v))}},
                                                sum));
        }
    out.push_back(std::move(handshakes));

    auto rls_calls = family("sluice_rls_calls_total",
                            "Rate-limit service calls (Envoy's RLS over gRPC), by how they ended: ok and over_limit "
                            "by the answer's overall code, else the gRPC status.",
                            MetricType::Counter);
    for (std::size_t c = 0; c < static_cast<std::size_t>(rls_call::count_); ++c) {
        std::uint64_t sum = 0;
        for (const auto& s : shards_) sum += s->rls_calls_[c].get();
        rls_calls.metric.push_back(counter({{"code", to_string(static_cast<rls_call>(c))}}, sum));
    }
    out.push_back(std::move(rls_calls));
    auto rls_duration = family("sluice_rls_call_duration_seconds",
                               "Time from a rate-limit service call's arrival to its answer.", MetricType::Histogram);
    rls_duration.metric.push_back(histogram(shards_, &shard::rls_duration_, duration_buckets));
    out.push_back(std::move(rls_duration));
    constexpr auto rls_results = static_cast<std::size_t>(rls_descriptor::count_);
    auto rls_descriptors = family("sluice_rls_descriptors_total",
                                  "Descriptors of rate-limit service calls, by domain, descriptor (its kind, "
                                  "unknown: no tiers matched it) and result.",
                                  MetricType::Counter);
    for (std::size_t d = 0; d < descriptors_.size(); ++d) {
        const auto tab = descriptors_[d].find('\t');
        const std::string domain = descriptors_[d].substr(0, tab);
        const std::string kind = tab == std::string::npos ? "other" : descriptors_[d].substr(tab + 1);
        for (std::size_t r = 0; r < rls_results; ++r) {
            std::uint64_t sum = 0;
            for (const auto& s : shards_) sum += s->rls_descriptors_[d * rls_results + r].get();
            rls_descriptors.metric.push_back(counter(
                {{"domain", domain}, {"descriptor", kind}, {"result", to_string(static_cast<rls_descriptor>(r))}},
                sum));
        }
    }
    out.push_back(std::move(rls_descriptors));
    auto rls_taken_back = family("sluice_rls_taken_back_total",
                                 "Rate-limit service admissions given back: a call's charged while its client gave up "
                                 "(deadline passed, cancelled), or one cost's request of a call another cost refused: "
                                 "given back (done) or left (failed: the store failed).",
                                 MetricType::Counter);
    for (std::size_t r = 0; r < 2; ++r) {
        std::uint64_t sum = 0;
        for (const auto& s : shards_) sum += s->rls_taken_back_[r].get();
        rls_taken_back.metric.push_back(counter({{"result", r == 0 ? "done" : "failed"}}, sum));
    }
    out.push_back(std::move(rls_taken_back));
    auto expiry = family("sluice_tls_certificate_expiry_seconds",
                         "Seconds until each certificate the TLS listener serves expires (its notAfter), by its "
                         "first name; negative once expired.",
                         MetricType::Gauge);
    const auto now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (const auto& [name, not_after] : certificates_) {
        auto g = gauge(not_after - now);
        g.label = {{"name", name}};
        expiry.metric.push_back(std::move(g));
    }
    out.push_back(std::move(expiry));
    auto busy = family("sluice_upstream_busy_total",
                       "Requests answered 503 upstream_busy: their pool had max_in_flight requests in flight "
                       "(at once, or after waiting queue.timeout), by pool.",
                       MetricType::Counter);
    auto queued = family("sluice_upstream_queued_total",
                         "Requests that waited in their pool's queue for a slot under max_in_flight, by pool.",
                         MetricType::Counter);
    for (std::size_t u = 0; u < upstreams_.size(); ++u) {
        std::uint64_t b = 0, q = 0;
        for (const auto& s : shards_) {
            b += s->upstream_busy_[u].get();
            q += s->upstream_queued_[u].get();
        }
        busy.metric.push_back(counter({{"upstream", upstreams_[u]}}, b));
        queued.metric.push_back(counter({{"upstream", upstreams_[u]}}, q));
    }
    out.push_back(std::move(busy));
    out.push_back(std::move(queued));
    auto idle = family("sluice_upstream_idle_connections", "Idle keep-alive connections to the upstream, pooled now.",
                       MetricType::Gauge);
    idle.metric.push_back(gauge(static_cast<std::int64_t>(total(&shard::idle_upstream_))));
    out.push_back(std::move(idle));

    for (const auto& collect : collectors_)
        for (auto& f : collect()) out.push_back(std::move(f));

    std::ostringstream text;
    prometheus::TextSerializer().Serialize(text, out);
    return text.str();
}

}  // namespace sluice::metrics
