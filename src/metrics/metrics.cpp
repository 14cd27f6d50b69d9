#include "metrics/metrics.hpp"

#include <prometheus/gauge.h>
#include <prometheus/text_serializer.h>

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
        case upstream_error::timeout: return "timeout";
        case upstream_error::reset: return "reset";
        case upstream_error::count_: break;
    }
    return "unknown";
}

shard::shard(std::size_t routes) : requests_(routes * classes) {}

void shard::request_done(std::size_t route, unsigned status, double seconds) {
    std::size_t cls = status >= 100 && status < 600 ? status / 100 - 1 : 4;
    requests_[route * classes + cls].add();
    std::size_t b = 0;
    while (b < duration_buckets.size() && seconds > duration_buckets[b]) ++b;
    duration_counts_[b].add();
    duration_sum_us_.add(static_cast<std::uint64_t>(seconds * 1e6));
}

registry::registry(std::size_t workers, std::vector<std::string> route_names)
    : routes_(std::move(route_names)), extra_(std::make_shared<prometheus::Registry>()) {
    for (std::size_t i = 0; i < workers; ++i) shards_.push_back(std::make_unique<shard>(routes_.size()));
    auto& info = prometheus::BuildGauge()
                     .Name("sluice_build_info")
                     .Help("Always 1; the version label says which build is running.")
                     .Register(*extra_);
    info.Add({{"version", SLUICE_VERSION}}).Set(1);
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

ClientMetric gauge(std::uint64_t v) {
    ClientMetric m;
    // A gauge summed over shards can be momentarily negative as a wrapped unsigned.
    m.gauge.value = static_cast<double>(static_cast<std::int64_t>(v));
    return m;
}

}  // namespace

std::string registry::scrape() const {
    static const char* class_names[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
    std::vector<MetricFamily> out = extra_->Collect();

    auto requests = family("sluice_requests_total", "Requests answered, by route and status class.",
                           MetricType::Counter);
    for (std::size_t r = 0; r < routes_.size(); ++r)
        for (std::size_t c = 0; c < shard::classes; ++c) {
            std::uint64_t sum = 0;
            for (const auto& s : shards_) sum += s->requests_[r * shard::classes + c].get();
            requests.metric.push_back(counter({{"route", routes_[r]}, {"status", class_names[c]}}, sum));
        }
    out.push_back(std::move(requests));

    auto duration = family("sluice_request_duration_seconds",
                           "Time from the first byte of a request to the last byte of its response.",
                           MetricType::Histogram);
    ClientMetric h;
    std::uint64_t cumulative = 0, sum_us = 0;
    for (std::size_t b = 0; b <= duration_buckets.size(); ++b) {
        for (const auto& s : shards_) cumulative += s->duration_counts_[b].get();
        double bound = b < duration_buckets.size() ? duration_buckets[b] : std::numeric_limits<double>::infinity();
        h.histogram.bucket.push_back({cumulative, bound});
    }
    for (const auto& s : shards_) sum_us += s->duration_sum_us_.get();
    h.histogram.sample_count = cumulative;
    h.histogram.sample_sum = static_cast<double>(sum_us) / 1e6;
    duration.metric.push_back(std::move(h));
    out.push_back(std::move(duration));

    auto errors = family("sluice_upstream_errors_total", "Failed upstream exchanges, by kind.", MetricType::Counter);
    for (std::size_t k = 0; k < static_cast<std::size_t>(upstream_error::count_); ++k) {
        std::uint64_t sum = 0;
        for (const auto& s : shards_) sum += s->upstream_errors_[k].get();
        errors.metric.push_back(counter({{"kind", to_string(static_cast<upstream_error>(k))}}, sum));
    }
    out.push_back(std::move(errors));

    auto total = [this](cell shard::*member) {
        std::uint64_t sum = 0;
        for (const auto& s : shards_) sum += ((*s).*member).get();
        return sum;
    };
    auto open = family("sluice_client_connections", "Client connections open now.", MetricType::Gauge);
    open.metric.push_back(gauge(total(&shard::open_connections_)));
    out.push_back(std::move(open));
    auto rejected = family("sluice_client_connections_rejected_total",
                           "Client connections closed at once because server.max_connections was reached.",
                           MetricType::Counter);
    rejected.metric.push_back(counter({}, total(&shard::rejected_connections_)));
    out.push_back(std::move(rejected));
    auto idle = family("sluice_upstream_idle_connections", "Idle keep-alive connections to the upstream, pooled now.",
                       MetricType::Gauge);
    idle.metric.push_back(gauge(total(&shard::idle_upstream_)));
    out.push_back(std::move(idle));

    std::ostringstream text;
    prometheus::TextSerializer().Serialize(text, out);
    return text.str();
}

}  // namespace sluice::metrics
