#include "server/upstream_cap.hpp"

#include "http/async.hpp"
#include "server/snapshot.hpp"
#include "server/worker.hpp"

#include <chrono>

namespace sluice::server {

using boost::asio::awaitable;

void cap_queue::wake_one() {
    for (auto& w : waiters) {
        if (w.woken) continue;
        w.woken = true;
        w.timer->cancel();
        return;
    }
}

upstream_cap::~upstream_cap() {
    try {
        stop_waiting();
        release();
    } catch (...) {  // a timer's cancel() throws only if the reactor fails: nothing left to do
    }
}

void upstream_cap::stop_waiting() {
    // Unlinked already when the worker's queues went first (the loop being torn down).
    if (!waiter_.is_linked()) return;
    waiter_.unlink();
    --queue_->waiting;
}

void upstream_cap::leave() {
    left_ = true;
    if (timer_) timer_->cancel();
}

void upstream_cap::release() {
    if (!lease_.held()) return;
    lease_.release();
    if (queue_ && queue_->waiting > 0) queue_->wake_one();
}

awaitable<upstream_cap::result> upstream_cap::take(std::shared_ptr<const snapshot> snap, std::size_t pool_index) {
    const auto& cfg = snap->cfg->upstreams[pool_index];
    if (cfg.max_in_flight == 0) co_return result::pass;
    const auto& cap = snap->pool_caps[pool_index];
    queue_ = &w_.caps.of(cfg.name, [this](const std::string& name) {
        return w_.hasher.hash(identity::to_string(identity::kind::upstream), name);
    });
    key_ = {identity::kind::upstream, queue_->id, std::span(&cap.tier, 1)};
    const limit::check_request r{std::span(&key_, 1), 1, false, w_.lease_ids.next()};
    const auto deadline = http::clock::now() + cfg.queue.timeout;
    left_ = false;
    for (;;) {
        const auto asked = http::clock::now();
        auto answer = w_.store.try_check(r);
        if (!answer) answer = co_await w_.store.check(r);
        w_.metrics.store_called(std::chrono::duration<double>(http::clock::now() - asked).count());
        if (answer->state != limit::check_result::status::ok) {
            // It may have taken the slot before its answer was lost (as limit_step does).
            w_.store.change_lease(r, limit::lease_change::release);
            w_.metrics.store_failed();
            stop_waiting();
            co_return snap->cfg->store.on_error == config::store_config::failure_mode::deny ? result::store_down
                                                                                            : result::pass;
        }
        if (answer->verdict.allowed) {
            stop_waiting();
            lease_.hold(w_.store, w_.metrics, snap, r, http::clock::now());
            w_.renew_while_held(lease_);
            co_return result::pass;
        }
        if (!waiter_.is_linked()) {
            if (cfg.queue.size == 0 || queue_->waiting >= cfg.queue.size) {
                w_.metrics.upstream_busy(cap.metric_slot);
                co_return result::busy;
            }
            if (!timer_) timer_.emplace(w_.ioc);
            waiter_.timer = &*timer_;
            waiter_.woken = false;
            queue_->waiters.push_back(waiter_);
            ++queue_->waiting;
            w_.metrics.upstream_queued(cap.metric_slot);
        }
        const auto now = http::clock::now();
        if (now >= deadline) {
            stop_waiting();
            w_.metrics.upstream_busy(cap.metric_slot);
            co_return result::busy;
        }
        if (left_) {
            stop_waiting();
            co_return result::left;
        }
        // Told of a slot given back while asking the store: again at once.
        if (waiter_.woken) {
            waiter_.woken = false;
            continue;
        }
        const auto again = now + std::chrono::milliseconds(10 + w_.lease_ids.next() % 41);
        timer_->expires_at(std::min(deadline, again));
        co_await timer_->async_wait(http::use_tuple);
        waiter_.woken = false;
        if (left_) {
            stop_waiting();
            co_return result::left;
        }
    }
}

}  // namespace sluice::server
