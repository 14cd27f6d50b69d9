#include "store/redis_store.hpp"

#include "base/text.hpp"
#include "store/cluster_slots.hpp"
#include "store/cluster_split.hpp"
#include "store/redis_script.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <openssl/evp.h>

#include <exception>
#include <stdexcept>

namespace sluice::store {

namespace asio = boost::asio;

namespace {

// Redis names a script by the SHA1 of its text, in lowercase hex.
std::string script_sha1(const std::string& script) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(script.data(), script.size(), md, &len, EVP_sha1(), nullptr) != 1)
        throw std::runtime_error("SHA1 unavailable");
    std::string out;
    base::append_hex(out, std::span<const unsigned char>(md, len));
    return out;
}

// A lease change, on its own: the transport is held until the reply.
asio::awaitable<void> send_lease(std::shared_ptr<redis_transport> transport, std::uint16_t slot,
                                 std::vector<std::string> argv, redis_clock::time_point deadline,
                                 std::shared_ptr<redis_counters> counters) {
    auto reply = co_await transport->call(slot, format_command(argv), true, deadline);
    if (!reply.ok() || reply.reply->type != REDIS_REPLY_INTEGER) counters->errors.add();
}

}  // namespace

redis_store::redis_store(const config::store_config& c, const redis_store_options& o)
    : config_(c),
      conn_opts_(redis_connection_options::from(c, o.script.empty() ? std::string(rate_limit_lua) : o.script, o.tls)),
      key_prefix_(c.redis_key_prefix),
      sha_(script_sha1(conn_opts_.script)),
      counters_(std::make_shared<redis_counters>()),
      cache_(o.deny_cache_max) {
    conn_opts_.max_in_flight = o.max_in_flight;
}

redis_store::~redis_store() = default;

void redis_store::start(boost::asio::any_io_executor ex) {
    if (transport_) return;
    ex_ = ex;
    batcher_ = std::make_unique<turn_batcher>(
        ex, conn_opts_.max_in_flight,
        [this](std::uint16_t slot, turn_batcher::requests rs, std::vector<limit::check_result>& out,
               redis_clock::time_point deadline) { return send_batch(slot, rs, out, deadline); });
    transport_ = make_transport(std::move(ex), config_, conn_opts_, counters_);
    started_.store(true, std::memory_order_release);
    transport_->start();
}

void redis_store::stop() {
    if (transport_) transport_->stop();
}

bool redis_store::ready() const { return started_.load(std::memory_order_acquire) && transport_->ready(); }

void redis_store::on_reload() {
    ++generation_;
    cache_.clear();
    counters_->deny_cache_size.set(0);
}

limit::check_result redis_store::failed(const char* why) {
    counters_->errors.add();
    return redis_script::failure(why);
}

std::optional<limit::check_result> redis_store::try_check(const limit::check_request& r) {
    try {
        // A count_rejected denial must reach the store: it is counted there. A query reads it.
        // An uncached one may have been lifted by a take_back since (on any gateway).
        if (auto denied =
                r.count_rejected || r.query || r.uncached ? std::nullopt : cache_.find(r, redis_clock::now())) {
            counters_->deny_cache_hits.add();
            counters_->deny_cache_size.set(cache_.size());
            limit::check_result out;
            out.verdict = std::move(*denied);
            return out;
        }
        counters_->deny_cache_size.set(cache_.size());
        // With a Cluster, one lost node fails only its own slots: usable, not ready.
        if (!started_.load(std::memory_order_acquire) || !transport_->usable())
            return failed(to_string(redis_error::not_ready));
        return std::nullopt;
    } catch (const std::exception&) {
        return failed("out of memory");
    }
}

boost::asio::awaitable<limit::check_result> redis_store::check(limit::check_request r) {
    if (!transport_) co_return failed("redis store not started");
    if (r.query) {
        auto answer = co_await query(r);
        co_return answer;
    }
    try {
        const auto asked = redis_clock::now();
        const auto deadline = asked + conn_opts_.timeout;
        const auto generation = generation_;
        limit::check_result out;
        // (Not a conditional expression: GCC 12 destroys a co_await's result twice there.)
        if (const auto slot = transport_->slot_of(r, key_prefix_)) {
            out = co_await batcher_->decide(r, *slot, deadline);
        } else {
            // (Named, not braced in the co_await's operand: GCC 12.)
            const split_context c{*transport_, sha_, key_prefix_, *counters_, conn_opts_.timeout};
            auto split = co_await decide_split(c, r, deadline);
            if (split.undone && r.lease != 0) change_lease(r, limit::lease_change::release);
            out = std::move(split.result);
        }
        if (out.state == limit::check_result::status::error) {
            counters_->errors.add();
            co_return out;
        }
        // A concurrency refusal holds only until some request ends: it is not cached.
        if (!out.verdict.allowed && !r.count_rejected && !r.uncached && !out.verdict.retry_unknown() &&
            generation == generation_) {
            cache_.insert(r, out.verdict, asked);
            counters_->deny_cache_size.set(cache_.size());
        }
        co_return out;
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    co_return failed("redis store failure");
}

boost::asio::awaitable<void> redis_store::send_batch(std::uint16_t slot, turn_batcher::requests rs,
                                                     std::vector<limit::check_result>& out,
                                                     redis_clock::time_point deadline) {
    counters_->checks.add(rs.size());
    std::string command = rs.size() == 1 ? redis_script::format_call(sha_, key_prefix_, *rs[0])
                                         : redis_script::format_batch(sha_, key_prefix_, rs);
    auto reply = co_await transport_->call(slot, std::move(command), true, deadline);
    if (!reply.ok()) {
        out.assign(rs.size(), redis_script::failure(to_string(reply.failure)));
    } else if (rs.size() == 1) {
        out.push_back(redis_script::parse_reply(reply.reply.get(), *rs[0]));
    } else {
        redis_script::parse_batch_reply(reply.reply.get(), rs, out);
    }
}

boost::asio::awaitable<bool> redis_store::take_back(limit::check_request r, limit::receipt rc, std::int64_t amount) {
    if (!transport_ || rc.at.size() != r.keys.size() || amount < 1) co_return false;
    amount = std::min(amount, r.cost);  // never what other admissions added
    try {
        const auto deadline = redis_clock::now() + conn_opts_.timeout;
        if (const auto slot = transport_->slot_of(r, key_prefix_)) {
            auto command = redis_script::format_take_back(sha_, key_prefix_, r, rc, amount);
            auto reply = co_await transport_->call(*slot, std::move(command), true, deadline);
            if (reply.ok() && reply.reply->type == REDIS_REPLY_INTEGER) co_return true;
            spdlog::warn("redis store: a charge could not be taken back ({})",
                         reply.ok() ? "error reply" : to_string(reply.failure));
            counters_->errors.add();
            co_return false;
        }
        const split_context c{*transport_, sha_, key_prefix_, *counters_, conn_opts_.timeout};
        const bool done = co_await take_back_split(c, r, std::move(rc), amount, deadline);
        co_return done;
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    counters_->errors.add();
    co_return false;
}

void redis_store::change_lease(const limit::check_request& r, limit::lease_change c) {
    if (r.lease == 0 || !started_.load(std::memory_order_acquire) || !transport_->usable()) return;
    const auto deadline = redis_clock::now() + conn_opts_.timeout;
    auto send = [&](const limit::check_request& part, std::uint16_t slot) {
        std::vector<std::string> argv;
        if (!redis_script::build_lease(argv, sha_, key_prefix_, part, c)) return;
        asio::co_spawn(ex_, send_lease(transport_, slot, std::move(argv), deadline, counters_), asio::detached);
    };
    if (const auto slot = transport_->slot_of(r, key_prefix_)) {
        send(r, *slot);
        return;
    }
    // One call per identifier: each is its own slot.
    for (std::size_t i = 0; i < r.keys.size(); ++i) {
        const limit::check_request one{r.keys.subspan(i, 1), r.cost, r.count_rejected, r.lease};
        send(one, transport_->slot_of(one, key_prefix_).value_or(0));
    }
}

boost::asio::awaitable<limit::check_result> redis_store::query(limit::check_request r) {
    try {
        const auto deadline = redis_clock::now() + conn_opts_.timeout;
        limit::check_result out;
        // One call for every identifier where one can hold them, else one per identifier.
        const bool whole = transport_->slot_of(r, key_prefix_).has_value();
        for (std::size_t i = 0; i < (whole ? 1 : r.keys.size()); ++i) {
            limit::check_request part = r;
            if (!whole) part.keys = r.keys.subspan(i, 1);
            const auto slot = transport_->slot_of(part, key_prefix_).value_or(0);
            auto command =
                redis_script::format_call(sha_, key_prefix_, part, std::nullopt, redis_script::call_flag::query);
            auto reply = co_await transport_->call(slot, std::move(command), true, deadline);
            if (!reply.ok()) co_return failed(to_string(reply.failure));
            auto answer = redis_script::parse_reply(reply.reply.get(), part);
            if (answer.state != limit::check_result::status::ok) {
                counters_->errors.add();
                co_return answer;
            }
            out.verdict.allowed = out.verdict.allowed && answer.verdict.allowed;
            out.verdict.retry_after = std::max(out.verdict.retry_after, answer.verdict.retry_after);
            for (auto t : answer.verdict.tiers) {
                if (!whole) t.key_index = i;
                out.verdict.tiers.push_back(t);
            }
        }
        co_return out;
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    co_return failed("redis store failure");
}

boost::asio::awaitable<bool> redis_store::reset(limit::check_request r) {
    if (!transport_) co_return false;
    try {
        const auto deadline = redis_clock::now() + conn_opts_.timeout;
        for (std::size_t i = 0; i < r.keys.size(); ++i) {
            const limit::check_request one{r.keys.subspan(i, 1)};
            const auto slot = transport_->slot_of(one, key_prefix_).value_or(0);
            auto reply = co_await transport_->call(slot, redis_admin::format_reset(sha_, key_prefix_, r.keys[i]), true,
                                                   deadline);
            if (!reply.ok() || reply.reply->type != REDIS_REPLY_INTEGER) {
                spdlog::warn("redis store: an identifier's tiers could not be reset ({})",
                             reply.ok() ? "error reply" : to_string(reply.failure));
                counters_->errors.add();
                co_return false;
            }
        }
        co_return true;
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    counters_->errors.add();
    co_return false;
}

boost::asio::awaitable<std::optional<redis_admin::control_reply>> redis_store::control(std::vector<std::string> args) {
    std::optional<redis_admin::control_reply> out;
    if (!transport_) co_return out;
    try {
        const auto deadline = redis_clock::now() + conn_opts_.timeout;
        const auto slot = cluster::key_slot(redis_admin::controls_key(key_prefix_));
        auto reply =
            co_await transport_->call(slot, redis_admin::format_control(sha_, key_prefix_, args), true, deadline);
        if (reply.ok()) out = redis_admin::parse_control(reply.reply.get());
        if (!out)
            spdlog::warn("redis store: the admin's controls call failed ({})",
                         reply.ok() ? "error reply" : to_string(reply.failure));
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    if (!out) counters_->errors.add();
    co_return out;
}

}  // namespace sluice::store
