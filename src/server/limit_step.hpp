// The limit phase of a request as the session runs it: admission (limit/admission.hpp)
// asks the worker's store, and the concurrency slots an admitted request takes are held,
// and renewed, until its answer is complete (held_lease).
//
// Thread: the owning worker's thread only; one per session.
#pragma once

#include "identity/caller.hpp"
#include "limit/admission.hpp"
#include "limit/controls.hpp"
#include "route/router.hpp"
#include "server/lease.hpp"
#include "server/worker.hpp"

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <memory>

namespace sluice::server {

class limit_step {
public:
    explicit limit_step(worker& w) : w_(w) {}

    // Decides the request of `who` on `r` (null: no route matched) under `snap` into `out`:
    // a pass when nothing limits it, else the policy's decision (limited, 403 for a plan
    // the policy lacks, store_down). An admitted request meeting a concurrency tier holds
    // its slots until release(); a store error gives them back at once. The references
    // are the session's, alive until the step completes.
    // `from`: the listener that asked (the decision's metric label).
    boost::asio::awaitable<void> decide(std::shared_ptr<const snapshot> snap, const route::route* r,
                                        const identity::caller& who, limit::outcome& out,
                                        metrics::listener from = metrics::listener::proxy);
    // The upstream reported `extra` cost beyond the route's (cost_header): charged to the
    // identifiers of the last decide() as the response head arrives, counted even past
    // their limits (the response is relayed whatever the charge leaves), so that the next
    // requests see it. Only after an admission: `decided` is the request's decision,
    // allowed or shadow_limited, else nothing is charged. Takes no slot.
    boost::asio::awaitable<void> charge(std::int64_t extra, limit::decision_kind decided);
    // The answer is complete (or failed): its slots are free.
    void release() { lease_.release(); }

private:
    // The operator's controls (limit/controls.hpp) on the prepared request: false when it is
    // blocked (`out` says so); else request_ is what the store is asked (an override's
    // tiers), and `asking` whether to ask it (a plan override prepares the request again).
    bool controlled(const limit::admission_context& ctx, const route::route& r, const identity::caller& who,
                    limit::outcome& out, bool& asking);

    worker& w_;
    limit::admission admission_;
    limit::control_step control_;
    const limit::check_request* request_ = &admission_.request();  // admission's, or control_'s
    limit::controls_ptr controls_;                                 // while request_ is control_'s
    identity::caller replanned_;                                   // the caller under a plan override
    held_lease lease_;                                             // the concurrency slots of the request being served
};

}  // namespace sluice::server
