#include "service/rls.hpp"

#include "base/async.hpp"
#include "base/every.hpp"
#include "limit/descriptors.hpp"
#include "limit/rate_limit_fields.hpp"

#include <envoy/service/ratelimit/v3/rls.grpc.pb.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <optional>
#include <stdexcept>

namespace sluice::service {

namespace {

namespace rls = envoy::service::ratelimit::v3;
using response = rls::RateLimitResponse;
using boost::asio::awaitable;

// The largest call gRPC reads (it answers a larger one RESOURCE_EXHAUSTED itself): Envoy's
// descriptors come from one request's headers, which Envoy bounds at 60 KiB by default.
constexpr int max_call_bytes = 64 * 1024;

// The most one call or descriptor may cost: a route's cost bound (config::detail::max_count).
constexpr std::uint64_t max_cost = 1'000'000'000;

// One call, as gRPC holds it until the reactor finishes.
struct call {
    grpc::CallbackServerContext* ctx;
    const rls::RateLimitRequest* request;
    response* answer;
};

// The descriptors of `r` as the limiter reads them; `entries` holds every entry, viewed by
// `asks` (a cost over max_cost as max_cost + 1: no tier admits it). A malformed call: why.
std::string read_call(const rls::RateLimitRequest& r, std::vector<limit::descriptor_entry>& entries,
                      std::vector<limit::descriptor_ask>& asks) {
    if (r.domain().empty()) return "domain is empty";
    if (r.descriptors().empty()) return "no descriptors";
    // Envoy's: an unset hits_addend (0) is one hit.
    const std::uint64_t call_cost = r.hits_addend() == 0 ? 1 : r.hits_addend();
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
        cost = std::min(cost, max_cost + 1);
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
        case 7 * (86400 * s): return response::RateLimit::WEEK;
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

// The answers of a call's requests, by descriptor_check::index() (an empty request's: allowed),
// and the requests as asked (a counted one with a receipt: give_back). The charged part is
// asked one request per cost (`charged_asked`, `charged_of`), and the shadow part's
// identifiers each alone (`shadow_asked`, `shadow_of`), so that one over its limit does not
// stop the others counting; of[charged] and of[shadow] hold their tiers together (key
// indexes as in check.request()).
struct answers {
    std::array<limit::check_result, limit::descriptor_check::parts> of;
    std::array<limit::check_request, limit::descriptor_check::parts> asked;
    std::vector<limit::check_request> charged_asked;
    std::vector<limit::check_result> charged_of;
    std::vector<limit::check_request> shadow_asked;
    std::vector<limit::check_result> shadow_of;
    const limit::check_result& operator[](part p) const { return of[limit::descriptor_check::index(p)]; }
};

bool failed(const limit::check_result& r) { return r.state == limit::check_result::status::error; }

// Whether a tier of key `key` refused in `d`.
bool refused(const limit::decision& d, std::size_t key) {
    return std::any_of(d.tiers.begin(), d.tiers.end(),
                       [key](const limit::tier_result& t) { return t.key_index == key && !t.admitted; });
}

bool admitted(const limit::check_result& r) { return !failed(r) && r.verdict.allowed; }

// Gives back what the admission `charged` of `r` added (nothing when it admitted nothing).
awaitable<void> give_back(server::worker& w, const limit::check_request& r, limit::check_result& charged) {
    const bool admitted =
        charged.state == limit::check_result::status::ok && charged.verdict.allowed && !charged.taken.at.empty();
    if (!admitted) co_return;
    const bool done = co_await w.store.take_back(r, std::move(charged.taken), r.cost);
    charged.taken = {};  // given back once
    w.metrics.rls_taken_back(done);
    if (!done) {
        w.metrics.store_failed();
        // A store that fails fails every call: one line per worker every 10 s says it.
        thread_local server::clock::time_point last{};
        if (!base::due(last, std::chrono::seconds(10))) co_return;
        spdlog::warn(
            "a rate-limit admission to give back (its client gave up, or a group of another cost refused the call) "
            "could not be given back in the store: it stays charged");
    }
}

// Asks the counted descriptors' groups (one request per cost) in turn, each once those before
// it admitted; when one refuses or fails, gives back exactly those admitted before it, so that
// a refused call consumes nothing. of[charged]: their decisions as one (allowed when all
// admitted; failed when one failed).
awaitable<void> ask_charged(server::worker& w, const limit::descriptor_check& check, answers& out) {
    auto& all = out.of[limit::descriptor_check::index(part::charged)];
    std::size_t first = 0;  // the group's first key in check.charged()
    for (const auto& g : check.charged_groups()) {
        auto r = g;
        // Its receipt gives it back when a later group refuses, or the call was answered too late.
        r.want_receipt = true;
        auto result = co_await ask(w, r);
        if (failed(result)) {
            all.state = result.state;
            all.error = result.error;
        } else {
            auto& v = all.verdict;
            for (auto t : result.verdict.tiers) {
                t.key_index += first;
                v.tiers.push_back(t);
            }
            if (!result.verdict.allowed)
                v.retry_after = std::max<limit::usec>(v.allowed ? 0 : v.retry_after, result.verdict.retry_after);
            v.allowed = v.allowed && result.verdict.allowed;
        }
        first += g.keys.size();
        const bool go_on = admitted(result);
        out.charged_asked.push_back(r);
        out.charged_of.push_back(std::move(result));
        if (go_on) continue;
        for (std::size_t k = 0; k + 1 < out.charged_of.size(); ++k)
            co_await give_back(w, out.charged_asked[k], out.charged_of[k]);
        co_return;
    }
}

// Asks the store for the requests of `check`, each only when those before it admitted the
// call (a refused call consumes nothing anywhere): the queried descriptors (which write
// nothing), the counted ones, then the shadow queries and each shadow identifier alone.
awaitable<answers> ask_all(server::worker& w, const limit::descriptor_check& check) {
    answers out;
    if (check.refused()) co_return out;  // by the key registry: nothing is asked
    const auto q = limit::descriptor_check::index(part::queried);
    if (!check.queried().keys.empty()) {
        out.asked[q] = check.queried();
        auto result = co_await ask(w, out.asked[q]);
        out.of[q] = std::move(result);
        if (!admitted(out.of[q])) co_return out;
    }
    co_await ask_charged(w, check, out);
    if (!admitted(out[part::charged])) co_return out;
    const auto sq = limit::descriptor_check::index(part::shadow_queried);
    if (!check.request(part::shadow_queried).keys.empty()) {
        out.asked[sq] = check.request(part::shadow_queried);
        auto result = co_await ask(w, out.asked[sq]);
        out.of[sq] = std::move(result);
    }
    const auto& shadow = check.request(part::shadow);
    auto& merged = out.of[limit::descriptor_check::index(part::shadow)].verdict;
    for (std::size_t k = 0; k < shadow.keys.size(); ++k) {
        auto r = shadow;
        r.keys = shadow.keys.subspan(k, 1);
        r.cost = check.key_cost(part::shadow, k);
        r.want_receipt = true;
        auto result = co_await ask(w, r);
        if (!failed(result)) {
            for (auto t : result.verdict.tiers) {
                t.key_index = k;
                merged.tiers.push_back(t);
            }
            merged.allowed = merged.allowed && result.verdict.allowed;
        }
        out.shadow_asked.push_back(r);
        out.shadow_of.push_back(std::move(result));
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
    if (check.refused()) {
        // No tier decided: OVER_LIMIT without a limit for the refused descriptors, OK (not
        // asked, nothing charged) for the others.
        out.set_overall_code(response::OVER_LIMIT);
        for (std::size_t i = 0; i < check.slots().size(); ++i) {
            const bool refused =
                check.slots()[i].refused != limit::descriptor_check::refusal::none && !check.node(i)->shadow;
            out.add_statuses()->set_code(refused ? response::OVER_LIMIT : response::OK);
        }
        return;
    }
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
        const auto why = check.slots()[i].refused;
        if (why == limit::descriptor_check::refusal::unknown_key)
            result = metrics::rls_descriptor::unknown_key;
        else if (why == limit::descriptor_check::refusal::no_plan)
            result = metrics::rls_descriptor::no_plan;
        else if (shadow_refused(a, check.slots()[i]))
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
        // An API key is a credential: its user names it.
        if (n->by_plan) limit::append_user_label(label, check.user(i));
        const auto entries = n->by_plan ? std::span<const limit::descriptor_entry>() : asks[i].entries;
        for (const auto& e : entries) {
            if (label.size() >= max_label) {
                label += "+…";
                break;
            }
            if (&e != entries.data()) label += '+';
            limit::append_label_value(label, e.value);
        }
        if (now < 0)
            now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                      .count();
        const auto& key = check.request(s.in).keys[s.key];
        o.refused(now, n->metric_slot, d.name, key.kind, key.id, label);
    }
}

// What decide() read of a call, kept for its access log line.
struct call_state {
    // The call's snapshot: check's nodes point into it, and a reload may replace the
    // worker's before the line is written.
    std::shared_ptr<const server::snapshot> snap;
    std::vector<limit::descriptor_entry> entries;
    std::vector<limit::descriptor_ask> asks;
    limit::descriptor_check check;
    bool prepared = false;  // check holds the call's requests
};

// A call with a descriptor of a cost over max_cost, which no tier can ever admit: refused
// (that descriptor OVER_LIMIT, the others OK), nothing asked or counted. An error instead
// would let the request through uncounted (Envoy's failure_mode_deny: false). False when
// no descriptor is over.
bool refuse_cost(std::span<const limit::descriptor_ask> asks, response& out) {
    const auto over = [](const limit::descriptor_ask& a) { return a.cost > static_cast<std::int64_t>(max_cost); };
    if (std::none_of(asks.begin(), asks.end(), over)) return false;
    out.set_overall_code(response::OVER_LIMIT);
    for (const auto& a : asks) out.add_statuses()->set_code(over(a) ? response::OVER_LIMIT : response::OK);
    return true;
}

// A call the limiter cannot decide (more limited descriptors than one store request carries,
// one without entries), answered INVALID_ARGUMENT: Envoy with failure_mode_deny: false lets
// its request through uncounted, so it is worth a line. One per worker every 10 s.
void warn_refused_call(const std::string& why) {
    thread_local server::clock::time_point last{};
    if (!base::due(last, std::chrono::seconds(10))) return;
    spdlog::warn(
        "a rate-limit call was answered INVALID_ARGUMENT (Envoy with failure_mode_deny: false lets its "
        "request through uncounted): {}",
        why);
}

// The status of a call its client no longer waits for: its deadline passed, or it was
// cancelled (gone, or the server shutting down); nullopt while it waits. `when`: where it was.
std::optional<grpc::Status> given_up(const call& c, const char* when) {
    if (std::chrono::system_clock::now() >= c.ctx->deadline())
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, std::string("the deadline passed ") + when);
    if (c.ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    return std::nullopt;
}

// Decides one call on worker `w`, its thread: the status to finish it with. A call its
// client gave up on before its answer is ready is not charged: refused before the store is
// asked, or its admissions (every request of it) given back once the store answers.
awaitable<grpc::Status> decide(server::worker& w, call c, call_state& st) {
    st.snap = w.snap;
    const auto& snap = st.snap;
    if (auto why = read_call(*c.request, st.entries, st.asks); !why.empty())
        co_return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
    if (refuse_cost(st.asks, *c.answer)) co_return grpc::Status::OK;
    const auto* domain = limit::find_domain(snap->domains, c.request->domain());
    const limit::key_registry registry{snap->clients.users ? &*snap->clients.users : nullptr,
                                       snap->cfg->clients.default_plan};
    if (auto why = st.check.prepare(w.hasher, domain, st.asks, registry); !why.empty()) {
        warn_refused_call(why);
        co_return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
    }
    st.prepared = true;
    if (auto gone = given_up(c, "before the call was decided")) co_return *gone;
    answers a = co_await ask_all(w, st.check);
    if (auto gone = given_up(c, "while the store decided: nothing is charged")) {
        for (std::size_t k = 0; k < a.charged_asked.size(); ++k)
            co_await give_back(w, a.charged_asked[k], a.charged_of[k]);
        for (std::size_t k = 0; k < a.shadow_asked.size(); ++k)
            co_await give_back(w, a.shadow_asked[k], a.shadow_of[k]);
        co_return *gone;
    }
    answer(*snap->cfg, st.check, a, *c.answer);
    count_descriptors(w.metrics, st.check, a, *c.answer, domain, snap->unknown_domain_slot);
    if (domain) record_refusals(w.refusals, st.check, a, st.asks, *domain);
    co_return grpc::Status::OK;
}

const char* status_name(grpc::StatusCode c) {
    using enum grpc::StatusCode;
    switch (c) {
        case OK: return "OK";
        case CANCELLED: return "CANCELLED";
        case UNKNOWN: return "UNKNOWN";
        case INVALID_ARGUMENT: return "INVALID_ARGUMENT";
        case DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
        case NOT_FOUND: return "NOT_FOUND";
        case ALREADY_EXISTS: return "ALREADY_EXISTS";
        case PERMISSION_DENIED: return "PERMISSION_DENIED";
        case UNAUTHENTICATED: return "UNAUTHENTICATED";
        case RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
        case FAILED_PRECONDITION: return "FAILED_PRECONDITION";
        case ABORTED: return "ABORTED";
        case OUT_OF_RANGE: return "OUT_OF_RANGE";
        case UNIMPLEMENTED: return "UNIMPLEMENTED";
        case INTERNAL: return "INTERNAL";
        case UNAVAILABLE: return "UNAVAILABLE";
        case DATA_LOSS: return "DATA_LOSS";
        default: return "UNKNOWN";
    }
}

// The call's access log line: its descriptors (their keys, the node each matched, the
// identifier's hash; values stay out), codes and duration.
// `request` may hold only the first descriptors of the `count` the call had.
void log_call(server::access_log::lane& log, const std::string& peer, const rls::RateLimitRequest& request,
              std::size_t count, const call_state* st, const grpc::Status& s, const response& out, double seconds) {
    server::rls_record r;
    r.peer = peer;
    r.domain = request.domain();
    r.grpc_status = status_name(s.error_code());
    if (s.ok()) r.code = response::Code_Name(out.overall_code());
    r.descriptor_count = count;
    r.total_us = static_cast<std::int64_t>(seconds * 1e6);
    const auto n =
        std::min({count, static_cast<std::size_t>(request.descriptors_size()), server::rls_record::max_descriptors});
    r.descriptors.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        auto& d = r.descriptors[i];
        for (const auto& e : request.descriptors(static_cast<int>(i)).entries()) {
            if (d.keys.size() == server::rls_record::max_keys) break;
            d.keys.push_back(e.key());
        }
        if (s.ok() && i < static_cast<std::size_t>(out.statuses_size()))
            d.code = response::Code_Name(out.statuses(static_cast<int>(i)).code());
        if (!st || !st->prepared) continue;
        const auto* node = st->check.node(i);
        if (!node) continue;
        d.matched = identity::to_string(node->kind);
        const auto& slot = st->check.slots()[i];
        if (slot.in == limit::descriptor_check::part::none) continue;
        const auto& req = st->check.request(slot.in);  // a shadow descriptor's too
        if (slot.key < req.keys.size()) d.id = identity::hasher::to_hex(req.keys[slot.key].id);
    }
    log.write(r);
}

metrics::rls_call ended(const grpc::Status& s, const response& r) {
    switch (s.error_code()) {
        case grpc::StatusCode::OK:
            return r.overall_code() == response::OVER_LIMIT ? metrics::rls_call::over_limit : metrics::rls_call::ok;
        case grpc::StatusCode::INVALID_ARGUMENT: return metrics::rls_call::invalid_argument;
        case grpc::StatusCode::DEADLINE_EXCEEDED: return metrics::rls_call::deadline_exceeded;
        case grpc::StatusCode::CANCELLED: return metrics::rls_call::cancelled;
        case grpc::StatusCode::RESOURCE_EXHAUSTED: return metrics::rls_call::resource_exhausted;
        default: return metrics::rls_call::internal;
    }
}

}  // namespace

class rls_service final : public rls::RateLimitService::CallbackService {
public:
    rls_service(std::vector<server::worker*> workers, std::size_t max_calls)
        : workers_(std::move(workers)), max_calls_(max_calls) {}

    grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx, const rls::RateLimitRequest* request,
                                              response* answer) override {
        auto* reactor = ctx->DefaultReactor();
        const auto arrived = server::clock::now();
        server::worker& w = *workers_[next_.fetch_add(1, std::memory_order_relaxed) % workers_.size()];
        if (calls_.fetch_add(1, std::memory_order_relaxed) >= max_calls_) {
            calls_.fetch_sub(1, std::memory_order_relaxed);
            refuse(w, ctx, *request, reactor, arrived);
            return reactor;
        }
        boost::asio::post(w.ioc, [this, &w, c = call{ctx, request, answer}, reactor, arrived] {
            auto st = std::make_shared<call_state>();
            boost::asio::co_spawn(w.ioc, decide(w, c, *st),
                                  [this, &w, c, st, reactor, arrived](const std::exception_ptr& e, grpc::Status s) {
                                      finish(w, c, *st, reactor, arrived, e, std::move(s));
                                  });
        });
        return reactor;
    }

private:
    // A decided call: counted, logged, answered. Worker `w`'s thread.
    void finish(server::worker& w, const call& c, const call_state& st, grpc::ServerUnaryReactor* reactor,
                server::clock::time_point arrived, const std::exception_ptr& e, grpc::Status s) {
        if (e) {
            base::log_exception("rate-limit call")(e);
            s = grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
        }
        const double seconds = std::chrono::duration<double>(server::clock::now() - arrived).count();
        w.metrics.rls_called(ended(s, *c.answer), seconds);
        if (w.access) {
            log_call(*w.access, c.ctx->peer(), *c.request, static_cast<std::size_t>(c.request->descriptors_size()), &st,
                     s, *c.answer, seconds);
        }
        calls_.fetch_sub(1, std::memory_order_relaxed);
        reactor->Finish(s);
    }

    // A call over service.max_concurrent_calls: answered at once from gRPC's thread, counted
    // (and logged) by worker `w`.
    void refuse(server::worker& w, grpc::CallbackServerContext* ctx, const rls::RateLimitRequest& request,
                grpc::ServerUnaryReactor* reactor, server::clock::time_point arrived) {
        const grpc::Status s(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             "over service.max_concurrent_calls (" + std::to_string(max_calls_) + ") calls at once");
        // What the line needs, copied: the call ends below. (w.access is set before gRPC starts.)
        std::shared_ptr<rls::RateLimitRequest> logged;
        std::string peer;
        const auto count = static_cast<std::size_t>(request.descriptors_size());
        if (w.access) {
            logged = std::make_shared<rls::RateLimitRequest>();
            logged->set_domain(request.domain().substr(0, server::rls_record::max_key_bytes));
            const auto n = std::min(count, server::rls_record::max_descriptors);
            for (std::size_t i = 0; i < n; ++i) {
                auto* d = logged->add_descriptors();
                for (const auto& e : request.descriptors(static_cast<int>(i)).entries()) {
                    if (static_cast<std::size_t>(d->entries_size()) == server::rls_record::max_keys) break;
                    d->add_entries()->set_key(e.key().substr(0, server::rls_record::max_key_bytes));
                }
            }
            peer = ctx->peer();
        }
        boost::asio::post(w.ioc, [&w, s, logged, peer = std::move(peer), count, arrived] {
            const double seconds = std::chrono::duration<double>(server::clock::now() - arrived).count();
            w.metrics.rls_called(metrics::rls_call::resource_exhausted, seconds);
            if (logged) log_call(*w.access, peer, *logged, count, nullptr, s, response{}, seconds);
        });
        reactor->Finish(s);
    }

    std::vector<server::worker*> workers_;
    const std::size_t max_calls_;
    std::atomic<std::size_t> next_{0};
    std::atomic<std::size_t> calls_{0};  // being decided now
};

struct rls_server::impl {
    impl(std::vector<server::worker*> workers, std::size_t max_calls) : service(std::move(workers), max_calls) {}
    rls_service service;
    std::unique_ptr<grpc::Server> server;
};

rls_server::rls_server(std::vector<server::worker*> workers, std::size_t max_calls)
    : impl_(std::make_unique<impl>(std::move(workers), max_calls)) {}

rls_server::~rls_server() { stop(config::duration(0)); }

std::string rls_server::start(const config::address& at) {
    // grpc.health.v1.Health: SERVING while the server runs, NOT_SERVING once it shuts down.
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort(at.to_string(), grpc::InsecureServerCredentials(), &port);
    // grpc++ sets SO_REUSEPORT by default: a second process would share the port unseen.
    b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    b.SetMaxReceiveMessageSize(max_call_bytes);
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
