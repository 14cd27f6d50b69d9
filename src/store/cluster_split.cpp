#include "store/cluster_split.hpp"

#include "store/cluster_slots.hpp"
#include "store/redis_script.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <vector>

namespace sluice::store {

namespace asio = boost::asio;
using redis_script::call_flag;

namespace {

bool ok(const limit::check_result& p) { return p.state == limit::check_result::status::ok; }

// One identifier of `r` on the node serving its slot, asking for its receipt if `receipt`;
// with flag query, only checked. A failure is its result.
asio::awaitable<limit::check_result> decide_part(split_context c, limit::check_request r, std::size_t key,
                                                 call_flag flag, bool receipt, redis_clock::time_point deadline) {
    try {
        limit::check_request one{r.keys.subspan(key, 1), r.cost, r.count_rejected, r.lease};
        one.want_receipt = receipt;
        std::vector<std::string> argv;
        redis_script::build_call(argv, c.sha, c.key_prefix, one, std::nullopt, flag);
        const auto slot = cluster::key_slot(argv[3]);  // the identifier's HASH: its hash tag
        auto reply = co_await c.transport.call(slot, format_command(argv), true, deadline);
        if (!reply.ok()) co_return redis_script::failure(to_string(reply.failure));
        auto out = redis_script::parse_reply(reply.reply.get(), one);
        for (auto& t : out.verdict.tiers) t.key_index = key;
        co_return out;
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    co_return redis_script::failure("redis store failure");
}

// Takes back `amount` of identifier `key`'s admission at `at`; false (logged) when it could not.
asio::awaitable<bool> take_back_part(split_context c, limit::check_request r, std::size_t key, limit::usec at,
                                     std::int64_t amount, redis_clock::time_point deadline) {
    try {
        const limit::check_request one{r.keys.subspan(key, 1), r.cost, false, r.lease};
        limit::receipt rc;
        rc.at.push_back(at);
        std::vector<std::string> argv;
        redis_script::build_take_back(argv, c.sha, c.key_prefix, one, rc, amount);
        const auto slot = cluster::key_slot(argv[3]);
        auto reply = co_await c.transport.call(slot, format_command(argv), true, deadline);
        if (reply.ok() && reply.reply->type == REDIS_REPLY_INTEGER) co_return true;
        spdlog::warn("redis cluster: a commit could not be taken back ({}); its identifier stays charged",
                     reply.ok() ? "error reply" : to_string(reply.failure));
    } catch (const std::exception& e) {
        spdlog::warn("redis cluster: a commit could not be taken back ({}); its identifier stays charged", e.what());
    }
    c.counters.errors.add();
    co_return false;
}

// take_back_part for each identifier i with at[i] set, all at once; how many were not taken back.
asio::awaitable<std::size_t> take_back_parts(split_context c, limit::check_request r, std::vector<limit::usec> at,
                                             std::int64_t amount, redis_clock::time_point deadline) {
    namespace ex = asio::experimental;
    const auto executor = co_await asio::this_coro::executor;
    using op = decltype(asio::co_spawn(executor, take_back_part(c, r, 0, 0, amount, deadline), asio::deferred));
    std::vector<op> ops;
    for (std::size_t i = 0; i < at.size(); ++i)
        if (at[i] != limit::no_time)
            ops.push_back(asio::co_spawn(executor, take_back_part(c, r, i, at[i], amount, deadline), asio::deferred));
    if (ops.empty()) co_return 0;
    auto [order, errors, done] =
        co_await ex::make_parallel_group(std::move(ops)).async_wait(ex::wait_for_all(), asio::use_awaitable);
    (void)order;
    std::size_t failed = 0;
    for (std::size_t i = 0; i < done.size(); ++i) failed += errors[i] || !done[i];
    co_return failed;
}

// After a counted refusal: the leases the admitting identifiers took are given back, with a
// deadline of their own.
asio::awaitable<void> release_admitted(split_context c, limit::check_request r,
                                       const std::vector<limit::check_result>& parts) {
    const auto release_by = redis_clock::now() + c.timeout;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        std::vector<std::string> argv;
        const limit::check_request one{r.keys.subspan(i, 1), r.cost, false, r.lease};
        if ((ok(parts[i]) && !parts[i].verdict.allowed) ||
            !redis_script::build_lease(argv, c.sha, c.key_prefix, one, limit::lease_change::release))
            continue;
        const auto slot = cluster::key_slot(argv[3]);
        auto reply = co_await c.transport.call(slot, format_command(argv), true, release_by);
        if (!reply.ok() || reply.reply->type != REDIS_REPLY_INTEGER) c.counters.errors.add();
    }
}

}  // namespace

asio::awaitable<split_outcome> decide_split(split_context c, limit::check_request r, redis_clock::time_point deadline) {
    namespace ex = asio::experimental;
    const auto executor = co_await asio::this_coro::executor;
    const std::size_t n = r.keys.size();
    // Every identifier at once, each on its own node (or pipelined on a shared one). A
    // count_rejected request is committed everywhere whatever the verdict: nothing to take back.
    const bool counted = r.count_rejected;
    const bool receipts = !counted || r.want_receipt;
    using part_op =
        decltype(asio::co_spawn(executor, decide_part(c, r, 0, call_flag::none, false, deadline), asio::deferred));
    std::vector<part_op> ops;
    ops.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
        ops.push_back(
            asio::co_spawn(executor, decide_part(c, r, i, call_flag::none, receipts, deadline), asio::deferred));
    auto [order, errors, parts] =
        co_await ex::make_parallel_group(std::move(ops)).async_wait(ex::wait_for_all(), asio::use_awaitable);
    (void)order;
    for (std::size_t i = 0; i < n; ++i)  // (a part catches its own; this is its frame not made)
        if (errors[i]) parts[i] = redis_script::failure("redis store failure");

    // A denial anywhere is the answer; else a failure anywhere; else the admission.
    bool denied = false;
    for (const auto& p : parts) denied = denied || (ok(p) && !p.verdict.allowed);
    // The instant each admitting identifier committed at (no_time: nothing to take back).
    std::vector<limit::usec> admitted(n, limit::no_time);
    for (std::size_t i = 0; i < n; ++i)
        if (ok(parts[i]) && parts[i].verdict.allowed && parts[i].taken.at.size() == 1)
            admitted[i] = parts[i].taken.at[0];
    if (denied && counted) {
        // As decide() does after counting a refusal: the identifiers that admitted are
        // checked again on what they now hold (the refusing ones' replies already are),
        // once the slots they took for a request that is not admitted are given back.
        // (A part that failed may have taken one too.)
        if (r.lease != 0) co_await release_admitted(c, r, parts);
        for (std::size_t i = 0; i < n; ++i) {
            if (ok(parts[i]) && parts[i].verdict.allowed)
                parts[i] = co_await decide_part(c, r, i, call_flag::query, false, deadline);
        }
    }
    split_outcome out;
    for (auto& p : parts) {
        if (!ok(p)) {
            if (!denied) co_return split_outcome{std::move(p), false};
            continue;
        }
        out.result.verdict.allowed = out.result.verdict.allowed && p.verdict.allowed;
        out.result.verdict.retry_after = std::max(out.result.verdict.retry_after, p.verdict.retry_after);
        for (auto& t : p.verdict.tiers) out.result.verdict.tiers.push_back(t);
    }
    if (!denied) {
        if (r.want_receipt) out.result.taken.at = std::move(admitted);
        co_return out;
    }
    if (counted) co_return out;

    // Take back what the others committed, exactly, all at once, within the same deadline.
    const auto parts_admitted = static_cast<std::size_t>(
        std::count_if(admitted.begin(), admitted.end(), [](limit::usec at) { return at != limit::no_time; }));
    const std::size_t failed = co_await take_back_parts(c, r, std::move(admitted), r.cost, deadline);
    c.counters.undos.add(parts_admitted - failed);  // (each failure is logged and counted as an error)
    out.undone = true;
    co_return out;
}

asio::awaitable<bool> take_back_split(split_context c, limit::check_request r, limit::receipt rc, std::int64_t amount,
                                      redis_clock::time_point deadline) {
    if (rc.at.size() != r.keys.size()) co_return false;
    const std::size_t failed = co_await take_back_parts(c, r, std::move(rc.at), amount, deadline);
    co_return failed == 0;
}

}  // namespace sluice::store
