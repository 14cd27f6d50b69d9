#include "server/limit_step.hpp"

#include <chrono>
#include <utility>

namespace sluice::server {

using boost::asio::awaitable;

awaitable<void> limit_step::decide(std::shared_ptr<const snapshot> snap, const route::route* r,
                                   const identity::caller& who, limit::outcome& out, metrics::listener from) {
    if (!r || !r->limits) co_return;
    const config::config& cfg = *snap->cfg;
    const limit::admission_context ctx{cfg.clients.ipv6_prefix, w_.hasher,    snap->generation, cfg.store.on_error,
                                       cfg.response.headers,    &w_.refusals, &w_.lease_ids,    from};
    request_ = &admission_.request();
    controls_.reset();
    bool asking = admission_.prepare(ctx, *r->limits, r->cost, who, out, &r->name);
    if (w_.controls && !w_.controls->empty()) {
        if (!controlled(ctx, *r, who, out, asking)) co_return;
    }
    if (!asking) co_return;
    const auto& request = *request_;
    const auto asked = clock::now();
    auto result = w_.store.try_check(request);
    if (!result) result = co_await w_.store.check(request);
    w_.metrics.store_called(std::chrono::duration<double>(clock::now() - asked).count());
    admission_.conclude(ctx, *r->limits, *result, w_.metrics, out);
    if (request.lease == 0) co_return;
    if (result->state != limit::check_result::status::ok) {
        // The store may have taken the slot before its answer was lost (a timeout, a node
        // of a cluster failing): give it back rather than leave it for the lease's length.
        w_.store.change_lease(request, limit::lease_change::release);
    } else if (result->verdict.allowed) {
        if (controls_) {
            // An override's tiers live in the controls snapshot: the lease keeps both alive.
            auto both = std::make_shared<std::pair<std::shared_ptr<const snapshot>, limit::controls_ptr>>(
                std::move(snap), controls_);
            snap = std::shared_ptr<const snapshot>(both, both->first.get());
        }
        lease_.hold(w_.store, w_.metrics, std::move(snap), request, clock::now());
        w_.renew_while_held(lease_);
    }
}

bool limit_step::controlled(const limit::admission_context& ctx, const route::route& r, const identity::caller& who,
                            limit::outcome& out, bool& asking) {
    const auto& c = *w_.controls;
    const limit::policy& p = *r.limits;
    const auto now_ms = limit::unix_ms();
    // Another plan for this user: the request prepared again as that plan's (a user whose
    // own plan the policy lacks, 403 otherwise, gets it too).
    if (c.has_plans() && p.user_by_plan && !who.user.empty() &&
        (asking || out.what == limit::outcome::kind::forbidden)) {
        const auto id = w_.hasher.hash(to_string(identity::kind::user), who.user);
        if (const std::string* plan = limit::control_step::plan_of(c, id, now_ms); plan && *plan != who.plan) {
            replanned_ = who;
            replanned_.plan = *plan;
            out.reset();
            asking = admission_.prepare(ctx, p, r.cost, replanned_, out, &r.name);
        }
    }
    if (!asking) return true;
    switch (control_.apply(c, p, admission_.request(), now_ms, &w_.lease_ids)) {
        case limit::control_step::result::none: return true;
        case limit::control_step::result::overridden:
            request_ = &control_.request();
            controls_ = w_.controls;
            return true;
        case limit::control_step::result::blocked: break;
    }
    const auto& k = admission_.request().keys[control_.blocked_key()];
    out.what = limit::outcome::kind::blocked;
    out.decision = limit::decision_kind::blocked;
    out.retry_after_s = (control_.blocked_until_ms() - now_ms + 999) / 1000;
    out.id_kind = k.kind;
    out.id = k.id;
    w_.metrics.blocked(p.metric_slot);
    return false;
}

awaitable<void> limit_step::charge(std::int64_t extra, limit::decision_kind decided) {
    using limit::decision_kind;
    if (extra <= 0 || (decided != decision_kind::allowed && decided != decision_kind::shadow_limited)) co_return;
    limit::check_request r = *request_;
    r.cost = extra;
    r.count_rejected = true;
    r.lease = 0;  // a charge takes no slot
    auto result = w_.store.try_check(r);
    if (!result) result = co_await w_.store.check(r);
    if (result->state == limit::check_result::status::error) w_.metrics.store_failed();
}

}  // namespace sluice::server
