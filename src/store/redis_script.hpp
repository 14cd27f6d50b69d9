// The Redis side of the limiter, without sockets: the EVALSHA call for a check_request and
// the decision in its reply. The script itself is lua/rate_limit.lua, embedded at build
// time (cmake/embed_lua.cmake) as `rate_limit_lua`; it reproduces limit::decide().
//
// Call layout (see the header of lua/rate_limit.lua):
//   EVALSHA <sha> <numkeys> KEYS... ARGV...
//   KEYS: per identifier in request order: "<prefix>{ip:<hex>}" (or {user:...}), then one
//         "<prefix>{ip:<hex>}:log:<tier id>" per log tier of it, in tier order.
//   ARGV: time override in µs ("" in production), cost, number of identifiers, then per
//         identifier: its tier count n and n times: algorithm (f|m|s|g|l|c), limit, per_us,
//         bucket_us, buckets, burst (or offset, or lease id), interval_us, tolerance_us,
//         min_interval_us, horizon_us, tier id.
// Reply: [allowed 0|1, retry_after_us, then per tier: remaining, reset_us, admitted 0|1], then
//        for r.want_receipt and an admission its receipt: per identifier the instant used.
//
// Thread: pure functions.
#pragma once

#include "limit/store.hpp"

#include <hiredis/hiredis.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::store {

// The source of lua/rate_limit.lua (generated at build time).
extern const char* const rate_limit_lua;

namespace redis_script {

// What a call asks beyond the decision (r.count_rejected and r.want_receipt are flags too:
// 'p', 'u' or both, 'U'):
//   none   nothing more;
//   query  check only: nothing is written.
enum class call_flag { none, query };

// Appends the full EVALSHA command: "EVALSHA", sha, numkeys, KEYS..., ARGV...
// `now_override` is for tests only: production passes "" and the script reads TIME.
void build_call(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                const limit::check_request& r, std::optional<limit::usec> now_override = std::nullopt,
                call_flag flag = call_flag::none);

// The same command in RESP, ready for redis_connection::call_formatted: what
// format_command() makes of build_call()'s argv, written in one string.
std::string format_call(std::string_view sha, std::string_view key_prefix, const limit::check_request& r,
                        std::optional<limit::usec> now_override = std::nullopt, call_flag flag = call_flag::none);

// One EVALSHA that decides every request of `rs` in turn, each as its own call (flag none)
// would (the script's batch mode: one TIME, one call's overhead). A request laid out as the
// one before it (the same policy) is sent as "~" and its keys, one the same as the one before
// it (a client's burst) as "=" alone. On one node the keys of a batch may lie in any slot; on
// a cluster they must share one. build_batch appends the same as argv (for tests).
std::string format_batch(std::string_view sha, std::string_view key_prefix,
                         std::span<const limit::check_request* const> rs,
                         std::optional<limit::usec> now_override = std::nullopt);
void build_batch(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                 std::span<const limit::check_request* const> rs,
                 std::optional<limit::usec> now_override = std::nullopt);

// Appends the EVALSHA that renews or releases lease r.lease in the concurrency tiers of r's
// identifiers (the identifiers without one are left out). False when none has one: nothing
// to send.
bool build_lease(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                 const limit::check_request& r, limit::lease_change change,
                 std::optional<limit::usec> now_override = std::nullopt);

// The decision, or status::error with a short message for error replies / malformed replies.
// Fills decision.tiers with pointers to the request's tiers (in request order), key_index set;
// with r.want_receipt and an admission, `taken` from the receipt the reply carries.
limit::check_result parse_reply(const redisReply* reply, const limit::check_request& r);

// A batch's reply, one result per request of `rs` (an error reply: that error for each).
void parse_batch_reply(const redisReply* reply, std::span<const limit::check_request* const> rs,
                       std::vector<limit::check_result>& out);

// The EVALSHA (mode undo) that takes back `amount` (0 < amount <= r.cost) of the admission of
// `r` that returned receipt `rc` (rc.at: one per key of r), exactly, as limit::take_back does:
// KEYS as r's check; ARGV: time override, "undo", amount, whole (1: amount is r.cost),
// number of identifiers, then per identifier its rc.at, its tier count and its tiers as a
// check lays them out. Its reply is the number of tiers that changed (an integer). In RESP
// (format_take_back) or as argv (build_take_back).
std::string format_take_back(std::string_view sha, std::string_view key_prefix, const limit::check_request& r,
                             const limit::receipt& rc, std::int64_t amount,
                             std::optional<limit::usec> now_override = std::nullopt);
void build_take_back(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                     const limit::check_request& r, const limit::receipt& rc, std::int64_t amount,
                     std::optional<limit::usec> now_override = std::nullopt);

// A check that failed (status::error), for logs and metrics `message`.
limit::check_result failure(std::string message);

// "<prefix>{ip:<32 hex>}" or "<prefix>{user:<32 hex>}", by the identifier's kind.
std::string key_name(std::string_view key_prefix, const limit::store_key& k);

// key_name(...) + ":log:" + tier id: the ZSET of a log tier (same cluster slot).
std::string log_key_name(std::string_view key_prefix, const limit::store_key& k, const limit::tier& t);

}  // namespace redis_script
}  // namespace sluice::store
