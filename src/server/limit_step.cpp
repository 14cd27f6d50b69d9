#include "server/limit_step.hpp"

#include <chrono>
#include <utility>

namespace sluice::server {

using boost::asio::awaitable;

awaitable<void> limit_step::decide(std::shared_ptr<const snapshot> snap, const route::route* r,
                                   const identity::caller& who, limit::outcome& out) {
    if (!r || !r->limits) co_return;
    const config::config& cfg = *snap->cfg;
    const limit::admission_context ctx{cfg.clients.ipv6_prefix, w_.hasher,    snap->generation, cfg.store.on_error,
                                       cfg.response.headers,    &w_.refusals, &w_.lease_ids};
    if (!admission_.prepare(ctx, *r->limits, r->cost, who, out, &r->name)) co_return;
    const auto asked = clock::now();
    auto result = w_.store.try_check(admission_.request());
    if (!result) result = co_await w_.store.check(admission_.request());
    w_.metrics.store_called(std::chrono::duration<double>(clock::now() - asked).count());
    admission_.conclude(ctx, *r->limits, *result, w_.metrics, out);
    if (admission_.request().lease == 0) co_return;
    if (result->state != limit::check_result::status::ok) {
        // The store may have taken the slot before its answer was lost (a timeout, a node
        // of a cluster failing): give it back rather than leave it for the lease's length.
        w_.store.change_lease(admission_.request(), limit::lease_change::release);
    } else if (result->verdict.allowed) {
        lease_.hold(w_.store, w_.metrics, std::move(snap), admission_.request(), clock::now());
        w_.renew_while_held(lease_);
    }
}

awaitable<void> limit_step::charge(std::int64_t extra, limit::decision_kind decided) {
    using limit::decision_kind;
    if (extra <= 0 || (decided != decision_kind::allowed && decided != decision_kind::shadow_limited)) co_return;
    limit::check_request r = admission_.request();
    r.cost = extra;
    r.count_rejected = true;
    r.lease = 0;  // a charge takes no slot
    auto result = w_.store.try_check(r);
    if (!result) result = co_await w_.store.check(r);
    if (result->state == limit::check_result::status::error) w_.metrics.store_failed();
}

}  // namespace sluice::server
