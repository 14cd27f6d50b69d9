#include "store/redis_store.hpp"

#include "store/redis_script.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace sluice::store {

namespace {

limit::usec to_usec(redis_clock::duration d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

template <class T>
void append_raw(std::string& out, const T& v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.append(buf, sizeof(T));
}

}  // namespace

// --- deny_cache ------------------------------------------------------------------------

void deny_cache::key_of(const limit::check_request& r) {
    key_.clear();
    append_raw(key_, r.cost);
    for (const auto& k : r.keys) {
        key_ += k.kind;
        key_.append(reinterpret_cast<const char*>(k.id.data()), k.id.size());
        append_raw(key_, static_cast<std::uint32_t>(k.tiers.size()));
        for (const auto& t : k.tiers) append_raw(key_, t.key);
    }
}

std::optional<limit::decision> deny_cache::find(const limit::check_request& r, redis_clock::time_point now) {
    if (map_.empty()) return std::nullopt;
    key_of(r);
    auto it = map_.find(key_);
    if (it == map_.end()) return std::nullopt;
    const entry& e = it->second;
    if (now >= e.until) {
        map_.erase(it);  // its place in order_ goes stale; evict_one() skips it
        return std::nullopt;
    }
    const limit::usec elapsed = to_usec(now - e.given);
    limit::decision d = e.verdict;
    d.retry_after = std::max<limit::usec>(to_usec(e.until - now), 1);
    for (std::size_t i = 0; i < d.tiers.size(); ++i) {
        auto& t = d.tiers[i];
        t.t = &r.keys[t.key_index].tiers[e.tier_pos[i]];
        t.reset = std::max<limit::usec>(t.reset - elapsed, 0);
    }
    return d;
}

void deny_cache::insert(const limit::check_request& r, const limit::decision& d, redis_clock::time_point asked) {
    if (d.allowed || d.retry_after <= 0) return;
    entry e;
    e.verdict = d;
    e.tier_pos.reserve(d.tiers.size());
    for (auto& t : e.verdict.tiers) {
        if (t.key_index >= r.keys.size()) return;
        const auto tiers = r.keys[t.key_index].tiers;
        if (t.t < tiers.data() || t.t >= tiers.data() + tiers.size()) return;
        e.tier_pos.push_back(static_cast<std::size_t>(t.t - tiers.data()));
        t.t = nullptr;  // the request's tiers may be gone by the next hit
    }
    e.given = asked;
    e.until = asked + std::chrono::microseconds(d.retry_after);
    e.seq = ++seq_;

    key_of(r);
    if (!map_.contains(key_))
        while (map_.size() >= max_ && !order_.empty()) evict_one();
    order_.emplace_back(e.seq, key_);
    map_.insert_or_assign(key_, std::move(e));
    if (order_.size() > 2 * max_ + 16) compact_order();
}

void deny_cache::evict_one() {
    auto [seq, key] = std::move(order_.front());
    order_.pop_front();
    auto it = map_.find(key);
    if (it != map_.end() && it->second.seq == seq) map_.erase(it);
}

void deny_cache::compact_order() {
    std::vector<std::pair<std::uint64_t, std::string>> live;
    live.reserve(map_.size());
    for (const auto& [key, e] : map_) live.emplace_back(e.seq, key);
    std::sort(live.begin(), live.end());
    order_.assign(std::make_move_iterator(live.begin()), std::make_move_iterator(live.end()));
}

void deny_cache::clear() {
    map_.clear();
    order_.clear();
}

// --- redis_store -----------------------------------------------------------------------

redis_store::redis_store(const config::store_config& c, const redis_store_options& o)
    : conn_opts_(redis_connection_options::from(c, o.script.empty() ? std::string(rate_limit_lua) : o.script)),
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
