#include "server/limit_step.hpp"

#include "base/every.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace sluice::server {

using boost::asio::awaitable;

awaitable<void> limit_step::decide(std::shared_ptr<const snapshot> snap, const route::route* r,
                                   const identity::caller& who, limit::outcome& out, metrics::listener from) {
    clear_charge();
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
    // A route that settles its charge at the response reserves its cost now: the requests
    // that come while its answer is pending see it.
    const bool settles = r->charge || !r->cost_header.empty();
    limit::check_request asked = *request_;
    asked.want_receipt = settles;
    asked.uncached = r->policy_settles;
    const auto start = clock::now();
    auto result = w_.store.try_check(asked);
    if (!result) result = co_await w_.store.check(asked);
    w_.metrics.store_called(std::chrono::duration<double>(clock::now() - start).count());
    admission_.conclude(ctx, *r->limits, *result, w_.metrics, out);
    if (settles &&
        (out.decision == limit::decision_kind::allowed || out.decision == limit::decision_kind::shadow_limited)) {
        settling_ = true;
        policy_slot_ = r->limits->metric_slot;
        charged_ = r->cost;
        // A shadow policy's denial committed nothing, or (count_rejected) nothing it can take back.
        const bool admitted = result->state == limit::check_result::status::ok && result->verdict.allowed;
        returnable_ = admitted && !result->taken.at.empty() ? r->cost : 0;
        receipt_ = admitted ? std::move(result->taken) : limit::receipt{};
    }
    if (asked.lease == 0) co_return;
    if (result->state != limit::check_result::status::ok) {
        // The store may have taken the slot before its answer was lost (a timeout, a node
        // of a cluster failing): give it back rather than leave it for the lease's length.
        w_.store.change_lease(*request_, limit::lease_change::release);
    } else if (result->verdict.allowed) {
        if (controls_) {
            // An override's tiers live in the controls snapshot: the lease keeps both alive.
            auto both = std::make_shared<std::pair<std::shared_ptr<const snapshot>, limit::controls_ptr>>(
                std::move(snap), controls_);
            snap = std::shared_ptr<const snapshot>(both, both->first.get());
        }
        lease_.hold(w_.store, w_.metrics, std::move(snap), *request_, clock::now());
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

awaitable<void> limit_step::settle(std::int64_t cost) {
    using metrics::settlement;
    if (!settling_) co_return;
    settled_ = true;
    cost = std::max<std::int64_t>(cost, 0);
    if (cost == charged_) {
        w_.metrics.settled(policy_slot_, settlement::charged);
        co_return;
    }
    if (cost > charged_) {
        limit::check_request r = *request_;
        r.cost = cost - charged_;
        r.count_rejected = true;
        r.lease = 0;  // a charge takes no slot
        r.want_receipt = false;
        auto result = w_.store.try_check(r);
        if (!result) result = co_await w_.store.check(r);
        if (result->state == limit::check_result::status::error) {
            count_failure();
            co_return;
        }
        charged_ = cost;
        w_.metrics.settled(policy_slot_, settlement::raised);
        co_return;
    }
    // What was charged beyond the admission has no receipt: it stays.
    const std::int64_t amount = std::min(charged_ - cost, returnable_);
    if (amount == 0) {
        w_.metrics.settled(policy_slot_, settlement::charged);
        co_return;
    }
    const bool done = co_await w_.store.take_back(*request_, receipt_, amount);
    if (!done) {
        count_failure();
        co_return;
    }
    returnable_ -= amount;
    charged_ -= amount;
    w_.metrics.settled(policy_slot_, settlement::refunded);
}

void limit_step::count_failure() {
    w_.metrics.store_failed();
    w_.metrics.settled(policy_slot_, metrics::settlement::failed);
    // A store that fails fails every request: one line per worker every 10 s says it.
    thread_local clock::time_point last{};
    if (!base::due(last, std::chrono::seconds(10))) return;
    spdlog::warn(
        "a charge could not be settled in the store: it stays as it stood (more charged than the outcome "
        "asks, never less)");
}

}  // namespace sluice::server
