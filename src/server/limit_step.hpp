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
    // its slots until release(); a store error gives them back at once. On a route whose
    // charge is settled at the response (`charge` or `cost_header`), an admission keeps
    // its receipt: its cost is reserved until settle(). The references are the session's,
    // alive until the step completes.
    // `from`: the listener that asked (the decision's metric label).
    boost::asio::awaitable<void> decide(std::shared_ptr<const snapshot> snap, const route::route* r,
                                        const identity::caller& who, limit::outcome& out,
                                        metrics::listener from = metrics::listener::proxy);
    // Whether the last decide() left a charge to settle: an admission (allowed or
    // shadow_limited) on a route that settles.
    bool settling() const { return settling_; }
    // The request's outcome is known and it costs `cost` (0 or more): the charge moves
    // there from where it stands (the route's cost after the admission). Less is given
    // back from the admission (store::take_back), more is charged as a reported cost was
    // always charged (counted even past the limits, no slot). Called again (an answer
    // replaced by Sluice's own), it moves from where the last call left it. A store that
    // fails leaves the charge where it stood (counted, logged at most every 10 s): never
    // less charged than was asked, at worst more. A shadow_limited request reserved
    // nothing (a denial commits nothing): only more is charged.
    boost::asio::awaitable<void> settle(std::int64_t cost);
    bool settled() const { return settled_; }
    // What the request is charged now: settled or not; -1 when nothing is (settling() false).
    std::int64_t charged() const { return settling_ ? charged_ : -1; }
    // The answer is complete (or failed): its slots are free.
    void release() { lease_.release(); }
    // A new request begins: nothing of the last one is settled again.
    void clear_charge() { settling_ = settled_ = false; }

private:
    // The operator's controls (limit/controls.hpp) on the prepared request: false when it is
    // blocked (`out` says so); else request_ is what the store is asked (an override's
    // tiers), and `asking` whether to ask it (a plan override prepares the request again).
    bool controlled(const limit::admission_context& ctx, const route::route& r, const identity::caller& who,
                    limit::outcome& out, bool& asking);
    void count_failure();

    worker& w_;
    limit::admission admission_;
    limit::control_step control_;
    const limit::check_request* request_ = &admission_.request();  // admission's, or control_'s
    limit::controls_ptr controls_;                                 // while request_ is control_'s
    identity::caller replanned_;                                   // the caller under a plan override
    held_lease lease_;                                             // the concurrency slots of the request being served
    // The charge of the request being served, when its route settles:
    bool settling_ = false;
    bool settled_ = false;         // settle() ran at least once
    std::size_t policy_slot_ = 0;  // for the settlement metric
    limit::receipt receipt_;       // what its admission committed
    std::int64_t returnable_ = 0;  // what take_back may still give back of the admission
    std::int64_t charged_ = 0;     // what it is charged now
};

}  // namespace sluice::server
