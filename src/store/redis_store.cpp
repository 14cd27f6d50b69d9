#include "store/redis_store.hpp"

#include "store/redis_script.hpp"

#include <spdlog/spdlog.h>

namespace sluice::store {

// --- redis_store -----------------------------------------------------------------------

redis_store::redis_store(const config::store_config& c, const redis_store_options& o)
    : conn_opts_(redis_connection_options::from(c, o.script.empty() ? std::string(rate_limit_lua) : o.script, o.tls)),
      key_prefix_(c.redis_key_prefix),
      counters_(std::make_shared<redis_counters>()),
      cache_(o.deny_cache_max) {
    conn_opts_.max_in_flight = o.max_in_flight;
}

redis_store::~redis_store() = default;

void redis_store::start(boost::asio::any_io_executor ex) {
    if (conn_) return;
    conn_ = redis_connection::create(std::move(ex), conn_opts_, counters_);
    started_.store(true, std::memory_order_release);
    conn_->start();
}

void redis_store::stop() {
    if (conn_) conn_->stop();
}

bool redis_store::ready() const { return started_.load(std::memory_order_acquire) && conn_->ready(); }

void redis_store::on_reload() {
    ++generation_;
    cache_.clear();
    counters_->deny_cache_size.set(0);
}

limit::check_result redis_store::failed(const char* why) {
    counters_->errors.add();
    limit::check_result out;
    out.state = limit::check_result::status::error;
    out.error = why;
    return out;
}

std::optional<limit::check_result> redis_store::try_check(const limit::check_request& r) {
    try {
        if (auto denied = cache_.find(r, redis_clock::now())) {
            counters_->deny_cache_hits.add();
            counters_->deny_cache_size.set(cache_.size());
            limit::check_result out;
            out.verdict = std::move(*denied);
            return out;
        }
        counters_->deny_cache_size.set(cache_.size());
        if (!ready()) return failed("redis not connected");
        return std::nullopt;
    } catch (const std::exception&) {
        return failed("out of memory");
    }
}

boost::asio::awaitable<limit::check_result> redis_store::check(limit::check_request r) {
    if (!conn_) co_return failed("redis store not started");
    try {
        const auto asked = redis_clock::now();
        const auto generation = generation_;
        std::vector<std::string> argv;
        redis_script::build_call(argv, conn_->script_sha(), key_prefix_, r);
        auto reply = co_await conn_->call(std::move(argv), true);
        if (!reply.ok()) co_return failed(redis_connection::to_string(reply.failure));
        auto out = redis_script::parse_reply(reply.reply.get(), r);
        if (out.state == limit::check_result::status::error) {
            counters_->errors.add();
            co_return out;
        }
        if (!out.verdict.allowed && generation == generation_) {
            cache_.insert(r, out.verdict, asked);
            counters_->deny_cache_size.set(cache_.size());
        }
        co_return out;
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    co_return failed("redis store failure");
}

}  // namespace sluice::store
