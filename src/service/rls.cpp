#include "service/rls.hpp"

#include "base/async.hpp"
#include "limit/descriptors.hpp"
#include "limit/rate_limit_fields.hpp"

#include <envoy/service/ratelimit/v3/rls.grpc.pb.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <stdexcept>

namespace sluice::service {

namespace {

namespace rls = envoy::service::ratelimit::v3;
using response = rls::RateLimitResponse;
using boost::asio::awaitable;

// The most one call or descriptor may cost: a route's cost bound (config::detail::max_count).
constexpr std::uint64_t max_cost = 1'000'000'000;

// One call, as gRPC holds it until the reactor finishes.
struct call {
    grpc::CallbackServerContext* ctx;
    const rls::RateLimitRequest* request;
    response* answer;
};

// The descriptors of `r` as the limiter reads them; `entries` holds every entry, viewed by
// `asks`. A malformed call: why.
std::string read_call(const rls::RateLimitRequest& r, std::vector<limit::descriptor_entry>& entries,
                      std::vector<limit::descriptor_ask>& asks) {
    if (r.domain().empty()) return "domain is empty";
    if (r.descriptors().empty()) return "no descriptors";
    // Envoy's: an unset hits_addend (0) is one hit.
    const std::uint64_t call_cost = r.hits_addend() == 0 ? 1 : r.hits_addend();
    if (call_cost > max_cost) return "hits_addend is over " + std::to_string(max_cost);
    std::size_t total = 0;
    for (const auto& d : r.descriptors()) total += static_cast<std::size_t>(d.entries_size());
    entries.reserve(total);  // asks view into it: no reallocation below
    for (int i = 0; i < r.descriptors_size(); ++i) {
        const auto& d = r.descriptors(i);
        const std::size_t first = entries.size();
        for (const auto& e : d.entries()) {
            if (e.key().empty()) return "descriptors[" + std::to_string(i) + "] has an entry without a key";
            entries.push_back({e.key(), e.value()});
        }
        std::uint64_t cost = call_cost;
        if (d.has_hits_addend()) cost = d.hits_addend().value();
        if (cost > max_cost)
            return "descriptors[" + std::to_string(i) + "].hits_addend is over " + std::to_string(max_cost);
        asks.push_back({std::span(entries).subspan(first, entries.size() - first), static_cast<std::int64_t>(cost)});
    }
    return "";
}

awaitable<limit::check_result> ask(server::worker& w, const limit::check_request& r) {
    const auto asked = server::clock::now();
    auto result = w.store.try_check(r);
    if (!result) result = co_await w.store.check(r);
    w.metrics.store_called(std::chrono::duration<double>(server::clock::now() - asked).count());
    if (result->state == limit::check_result::status::error) w.metrics.store_failed();
    co_return std::move(*result);
}

response::RateLimit::Unit unit_of(const limit::tier& t) {
    constexpr limit::usec s = 1'000'000;
    if (t.month) return response::RateLimit::MONTH;
    switch (t.per) {
        case s: return response::RateLimit::SECOND;
        case 60 * s: return response::RateLimit::MINUTE;
        case 3600 * s: return response::RateLimit::HOUR;
        case 86400 * s: return response::RateLimit::DAY;
        default: return response::RateLimit::UNKNOWN;  // its name says the window
    }
}

std::uint32_t clamp32(std::int64_t n) {
    return static_cast<std::uint32_t>(std::clamp<std::int64_t>(n, 0, std::numeric_limits<std::uint32_t>::max()));
}

// A descriptor's status from its identifier's tiers in `d` (key `key`): the tier that binds
// (a refusing one first, then the least remaining, then the longest reset).
void set_status(response::DescriptorStatus& st, const limit::decision& d, std::size_t key) {
    const limit::tier_result* tight = nullptr;
    bool refused = false;
    for (const auto& r : d.tiers) {
        if (r.key_index != key) continue;
        refused = refused || !r.admitted;
        if (!tight || (!r.admitted && tight->admitted) ||
            (r.admitted == tight->admitted &&
             (r.remaining < tight->remaining || (r.remaining == tight->remaining && r.reset > tight->reset))))
            tight = &r;
    }
    st.set_code(refused ? response::OVER_LIMIT : response::OK);
    if (!tight) return;
    auto* limit = st.mutable_current_limit();
    limit->set_name(tight->t->name);
    limit->set_requests_per_unit(clamp32(tight->t->limit));
    limit->set_unit(unit_of(*tight->t));
    st.set_limit_remaining(clamp32(tight->remaining));
    auto* reset = st.mutable_duration_until_reset();
    reset->set_seconds(tight->reset / 1'000'000);
    reset->set_nanos(static_cast<std::int32_t>(tight->reset % 1'000'000) * 1000);
}

// The "Name: value\r\n" lines of limit::append_rate_limit_fields as headers to add.
void add_fields(response& r, std::string_view lines) {
    while (!lines.empty()) {
        const auto end = lines.find("\r\n");
        const auto line = lines.substr(0, end);
        lines.remove_prefix(end == std::string_view::npos ? lines.size() : end + 2);
        const auto colon = line.find(": ");
        if (colon == std::string_view::npos) continue;
        auto* h = r.add_response_headers_to_add();
        h->set_key(std::string(line.substr(0, colon)));
        h->set_value(std::string(line.substr(colon + 2)));
    }
}

using part = limit::descriptor_check::part;

// The answers of a call's requests, by descriptor_check::index() (an empty request's: allowed).
struct answers {
    std::array<limit::check_result, limit::descriptor_check::parts> of;
    const limit::check_result& operator[](part p) const { return of[limit::descriptor_check::index(p)]; }
};

bool failed(const limit::check_result& r) { return r.state == limit::check_result::status::error; }

// Whether a tier of key `key` refused in `d`.
bool refused(const limit::decision& d, std::size_t key) {
    return std::any_of(d.tiers.begin(), d.tiers.end(),
                       [key](const limit::tier_result& t) { return t.key_index == key && !t.admitted; });
}

// Asks the store for each request of `check`: the enforced ones, then, only when they admit
// the call, the shadow ones (a refused call consumes nothing anywhere).
awaitable<answers> ask_all(server::worker& w, const limit::descriptor_check& check) {
    answers out;
    for (const part p : {part::charged, part::queried, part::shadow, part::shadow_queried}) {
        if (limit::descriptor_check::is_shadow(p)) {
            const auto& c = out[part::charged];
            const auto& q = out[part::queried];
            if (failed(c) || failed(q) || !c.verdict.allowed || !q.verdict.allowed) break;
        }
        if (check.request(p).keys.empty()) continue;
        auto result = co_await ask(w, check.request(p));
        out.of[limit::descriptor_check::index(p)] = std::move(result);
    }
    co_return out;
}

// A shadow descriptor refused (its request asked and answered).
bool shadow_refused(const answers& a, const limit::descriptor_check::slot& s) {
    if (!limit::descriptor_check::is_shadow(s.in)) return false;
    const auto& r = a[s.in];
    return !failed(r) && refused(r.verdict, s.key);
}

// The answer to one call: the enforced requests' decisions (either may be empty), as one. A
// shadow descriptor's status is OK without its limit: as a shadow policy's, invisible to clients.
void answer(const config::config& cfg, const limit::descriptor_check& check, const answers& a, response& out) {
    const auto& charged = a[part::charged];
    const auto& queried = a[part::queried];
    if (failed(charged) || failed(queried)) {
        // The store could not answer: store.on_error as on the gateway path (local decided already).
        const bool deny = cfg.store.on_error == config::store_config::failure_mode::deny;
        out.set_overall_code(deny ? response::OVER_LIMIT : response::OK);
        for (const auto& s : check.slots())
            out.add_statuses()->set_code(limit::descriptor_check::is_shadow(s.in) ? response::OK : out.overall_code());
        return;
    }
    limit::decision all;
    all.allowed = charged.verdict.allowed && queried.verdict.allowed;
    all.retry_after = std::max(charged.verdict.allowed ? 0 : charged.verdict.retry_after,
                               queried.verdict.allowed ? 0 : queried.verdict.retry_after);
    all.tiers = charged.verdict.tiers;
    all.tiers.insert(all.tiers.end(), queried.verdict.tiers.begin(), queried.verdict.tiers.end());
    out.set_overall_code(all.allowed ? response::OK : response::OVER_LIMIT);
    for (const auto& s : check.slots()) {
        auto* st = out.add_statuses();
        if (s.in == part::charged || s.in == part::queried)
            set_status(*st, a[s.in].verdict, s.key);
        else
            st->set_code(response::OK);
    }
    std::string fields;
    limit::append_rate_limit_fields(fields, all, cfg.response.headers);
    if (!all.allowed) {
        if (const auto retry = limit::retry_after_seconds(all); retry > 0)
            fields.append("Retry-After: ").append(std::to_string(retry)).append("\r\n");
    }
    add_fields(out, fields);
}

// Each descriptor of an answered call, by its node's slot (unknown: the domain's, or that of
// domains not configured).
void count_descriptors(metrics::shard& m, const limit::descriptor_check& check, const answers& a, const response& out,
                       const limit::descriptor_domain* d, std::size_t unknown_domain_slot) {
    for (std::size_t i = 0; i < check.slots().size(); ++i) {
        const auto* n = check.node(i);
        if (!n) {
            m.rls_decided(d ? d->unknown_slot : unknown_domain_slot, metrics::rls_descriptor::unknown);
            continue;
        }
        auto result = metrics::rls_descriptor::allowed;
        if (shadow_refused(a, check.slots()[i]))
            result = metrics::rls_descriptor::shadow_limited;
        else if (i < static_cast<std::size_t>(out.statuses_size()) &&
                 out.statuses(static_cast<int>(i)).code() == response::OVER_LIMIT)
            result = metrics::rls_descriptor::limited;
        m.rls_decided(n->metric_slot, result);
    }
}

// The enforced descriptors the store refused, into the worker's offenders (GET /top): kind
// descriptor:<path>, labelled by the descriptor's values joined by '+', the domain as policy.
// Each identifier once per call; shadow refusals are not recorded.
void record_refusals(limit::offenders& o, const limit::descriptor_check& check, const answers& a,
                     std::span<const limit::descriptor_ask> asks, const limit::descriptor_domain& d) {
    constexpr std::size_t max_label = 128;  // then the other values are left out
    std::vector<limit::descriptor_check::slot> seen;
    std::int64_t now = -1;
    for (std::size_t i = 0; i < check.slots().size(); ++i) {
        const auto s = check.slots()[i];
        const auto* n = check.node(i);
        if (!n || (s.in != part::charged && s.in != part::queried)) continue;
        const auto& r = a[s.in];
        if (failed(r) || !refused(r.verdict, s.key)) continue;
        if (std::any_of(seen.begin(), seen.end(), [&](const auto& x) { return x.in == s.in && x.key == s.key; }))
            continue;
        seen.push_back(s);
        std::string label;
        for (const auto& e : asks[i].entries) {
            if (label.size() >= max_label) {
                label += "+…";
                break;
            }
            if (&e != asks[i].entries.data()) label += '+';
            limit::append_label_value(label, e.value);
        }
        if (now < 0)
            now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                      .count();
        const auto& key = check.request(s.in).keys[s.key];
        o.refused(now, n->metric_slot, d.name, key.kind, key.id, label);
    }
}

// Decides one call on worker `w`, its thread: the status to finish it with.
awaitable<grpc::Status> decide(server::worker& w, call c) {
    const auto snap = w.snap;
    std::vector<limit::descriptor_entry> entries;
    std::vector<limit::descriptor_ask> asks;
    if (auto why = read_call(*c.request, entries, asks); !why.empty())
        co_return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
    limit::descriptor_check check;
    const auto* domain = limit::find_domain(snap->domains, c.request->domain());
    if (auto why = check.prepare(w.hasher, domain, asks); !why.empty())
        co_return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
    // A call its client gave up on is not charged.
    if (c.ctx->IsCancelled()) co_return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    if (std::chrono::system_clock::now() >= c.ctx->deadline())
        co_return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline passed before the call was decided");
    const answers a = co_await ask_all(w, check);
    answer(*snap->cfg, check, a, *c.answer);
    count_descriptors(w.metrics, check, a, *c.answer, domain, snap->unknown_domain_slot);
    if (domain) record_refusals(w.refusals, check, a, asks, *domain);
    co_return grpc::Status::OK;
}

metrics::rls_call ended(const grpc::Status& s, const response& r) {
    switch (s.error_code()) {
        case grpc::StatusCode::OK:
            return r.overall_code() == response::OVER_LIMIT ? metrics::rls_call::over_limit : metrics::rls_call::ok;
        case grpc::StatusCode::INVALID_ARGUMENT: return metrics::rls_call::invalid_argument;
        case grpc::StatusCode::DEADLINE_EXCEEDED: return metrics::rls_call::deadline_exceeded;
        case grpc::StatusCode::CANCELLED: return metrics::rls_call::cancelled;
        default: return metrics::rls_call::internal;
    }
}

}  // namespace

class rls_service final : public rls::RateLimitService::CallbackService {
public:
    explicit rls_service(std::vector<server::worker*> workers) : workers_(std::move(workers)) {}

    grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx, const rls::RateLimitRequest* request,
                                              response* answer) override {
        auto* reactor = ctx->DefaultReactor();
        const auto arrived = server::clock::now();
        server::worker& w = *workers_[next_.fetch_add(1, std::memory_order_relaxed) % workers_.size()];
        boost::asio::post(w.ioc, [&w, c = call{ctx, request, answer}, reactor, arrived] {
            boost::asio::co_spawn(
                w.ioc, decide(w, c), [&w, c, reactor, arrived](const std::exception_ptr& e, grpc::Status s) {
                    if (e) {
                        base::log_exception("rate-limit call")(e);
                        s = grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
                    }
                    w.metrics.rls_called(ended(s, *c.answer),
                                         std::chrono::duration<double>(server::clock::now() - arrived).count());
                    reactor->Finish(s);
                });
        });
        return reactor;
    }

private:
    std::vector<server::worker*> workers_;
    std::atomic<std::size_t> next_{0};
};

struct rls_server::impl {
    explicit impl(std::vector<server::worker*> workers) : service(std::move(workers)) {}
    rls_service service;
    std::unique_ptr<grpc::Server> server;
};

rls_server::rls_server(std::vector<server::worker*> workers) : impl_(std::make_unique<impl>(std::move(workers))) {}

rls_server::~rls_server() { stop(config::duration(0)); }

std::string rls_server::start(const config::address& at) {
    // grpc.health.v1.Health: SERVING while the server runs, NOT_SERVING once it shuts down.
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort(at.to_string(), grpc::InsecureServerCredentials(), &port);
    // grpc++ sets SO_REUSEPORT by default: a second process would share the port unseen.
    b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    b.RegisterService(&impl_->service);
    impl_->server = b.BuildAndStart();
    if (!impl_->server || port == 0)
        throw std::runtime_error(at.to_string() + ": cannot listen for gRPC (address in use or not local?)");
    return config::address{at.host, static_cast<std::uint16_t>(port)}.to_string();
}

void rls_server::stop(config::duration grace) {
    if (!impl_->server) return;
    impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
    impl_->server->Wait();
    impl_->server.reset();
}

}  // namespace sluice::service
