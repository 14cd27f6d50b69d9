// The concurrency slots one request holds, from its admission to the end of its answer
// (docs/algorithms.md, "Concurrency limits"). While held, the worker renews them every third of the
// shortest lease; release() (or the destructor: the client went away) gives them back.
//
// Thread: the owning worker's thread only.
#pragma once

#include "http/deadline_sweep.hpp"
#include "limit/store.hpp"
#include "metrics/metrics.hpp"

#include <boost/intrusive/list.hpp>

#include <array>
#include <memory>

namespace sluice::server {

struct snapshot;

class held_lease : public boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
public:
    held_lease() = default;
    held_lease(const held_lease&) = delete;
    held_lease& operator=(const held_lease&) = delete;
    ~held_lease() { release(); }

    // Holds r's lease (r.lease != 0, admitted by `st`). `snap` keeps r's tiers alive; `m`
    // counts the leases held.
    void hold(limit::store& st, metrics::shard& m, std::shared_ptr<const snapshot> snap, const limit::check_request& r,
              http::clock::time_point now);
    void release();
    // Lets go without telling the store, which is going away (the process is stopping:
    // the slots lapse at their lease, as a dead gateway's do).
    void forget();
    bool held() const { return r_.lease != 0; }
    // Renews the lease if a third of it has passed since it was taken or last renewed.
    void renew_if_due(http::clock::time_point now);

private:
    limit::store* store_ = nullptr;
    metrics::shard* metrics_ = nullptr;
    std::shared_ptr<const snapshot> snap_;
    std::array<limit::store_key, config::max_policy_kinds> keys_{};  // every key of a request
    limit::check_request r_;
    http::clock::duration every_{};
    http::clock::time_point due_{};
};

}  // namespace sluice::server
