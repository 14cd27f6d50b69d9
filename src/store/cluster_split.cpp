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

// One identifier of `r` on the node serving its slot; with `undo`, its commit's record (flag
// undo); with flag query, only checked. A failure is its result.
asio::awaitable<limit::check_result> decide_part(split_context c, limit::check_request r, std::size_t key,
                                                 call_flag flag, redis_script::undo_record* undo,
                                                 redis_clock::time_point deadline) {
    try {
        const limit::check_request one{r.keys.subspan(key, 1), r.cost, r.count_rejected, r.lease};
        std::vector<std::string> argv;
        redis_script::build_call(argv, c.sha, c.key_prefix, one, std::nullopt, flag);
        const auto slot = cluster::key_slot(argv[3]);  // the identifier's HASH: its hash tag
        auto reply = co_await c.transport.call(slot, format_command(argv), true, deadline);
        if (!reply.ok()) co_return redis_script::failure(to_string(reply.failure));
        auto out = redis_script::parse_reply(reply.reply.get(), one, undo);
        for (auto& t : out.verdict.tiers) t.key_index = key;
        co_return out;
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    co_return redis_script::failure("redis store failure");
}

// Takes back identifier `key`'s commit `u`; a failure is logged.
asio::awaitable<void> undo_part(split_context c, limit::check_request r, std::size_t key,
                                const redis_script::undo_record* u, redis_clock::time_point deadline) {
    try {
        std::vector<std::string> argv;
        redis_script::build_undo(argv, c.sha, c.key_prefix, r.keys[key], r.cost, *u);
        const auto slot = cluster::key_slot(argv[3]);
        auto reply = co_await c.transport.call(slot, format_command(argv), true, deadline);
        if (reply.ok() && reply.reply->type == REDIS_REPLY_INTEGER) {
            c.counters.undos.add();
            co_return;
        }
        spdlog::warn("redis cluster: a commit could not be taken back ({}); its identifier stays charged",
                     reply.ok() ? "error reply" : to_string(reply.failure));
    } catch (const std::exception& e) {
        spdlog::warn("redis cluster: a commit could not be taken back ({}); its identifier stays charged", e.what());
    }
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
    // count_rejected request is committed everywhere whatever the verdict: nothing to undo.
    const bool counted = r.count_rejected;
    std::vector<redis_script::undo_record> undo(n);
    using part_op =
        decltype(asio::co_spawn(executor, decide_part(c, r, 0, call_flag::none, nullptr, deadline), asio::deferred));
    std::vector<part_op> ops;
    ops.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        ops.push_back(asio::co_spawn(
            executor,
            decide_part(c, r, i, counted ? call_flag::none : call_flag::undo, counted ? nullptr : &undo[i], deadline),
            asio::deferred));
    }
    auto [order, errors, parts] =
        co_await ex::make_parallel_group(std::move(ops)).async_wait(ex::wait_for_all(), asio::use_awaitable);
    (void)order;
    for (std::size_t i = 0; i < n; ++i)  // (a part catches its own; this is its frame not made)
        if (errors[i]) parts[i] = redis_script::failure("redis store failure");

    // A denial anywhere is the answer; else a failure anywhere; else the admission.
    bool denied = false;
    for (const auto& p : parts) denied = denied || (ok(p) && !p.verdict.allowed);
    if (denied && counted) {
        // As decide() does after counting a refusal: the identifiers that admitted are
        // checked again on what they now hold (the refusing ones' replies already are),
        // once the slots they took for a request that is not admitted are given back.
        // (A part that failed may have taken one too.)
        if (r.lease != 0) co_await release_admitted(c, r, parts);
        for (std::size_t i = 0; i < n; ++i) {
            if (ok(parts[i]) && parts[i].verdict.allowed)
                parts[i] = co_await decide_part(c, r, i, call_flag::query, nullptr, deadline);
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
    if (!denied || counted) co_return out;

    // Take back what the others committed, all at once, within the same deadline.
    using undo_op = decltype(asio::co_spawn(executor, undo_part(c, r, 0, &undo[0], deadline), asio::deferred));
    std::vector<undo_op> undos;
    for (std::size_t i = 0; i < n; ++i)
        if (ok(parts[i]) && parts[i].verdict.allowed)
            undos.push_back(asio::co_spawn(executor, undo_part(c, r, i, &undo[i], deadline), asio::deferred));
    if (!undos.empty()) {
        auto [undo_order, undo_errors] =
            co_await ex::make_parallel_group(std::move(undos)).async_wait(ex::wait_for_all(), asio::use_awaitable);
        (void)undo_order;
        for (const auto& e : undo_errors)  // (an undo catches its own; this is its frame not made)
            if (e) spdlog::warn("redis cluster: a commit could not be taken back; its identifier stays charged");
    }
    out.undone = true;
    co_return out;
}

}  // namespace sluice::store
