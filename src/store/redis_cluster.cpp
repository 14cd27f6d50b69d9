#include "store/redis_cluster.hpp"

#include "base/async.hpp"
#include "store/redis_script.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace sluice::store {

namespace asio = boost::asio;
using asio::awaitable;

namespace {

using base::use_tuple;
constexpr auto tick = std::chrono::milliseconds(100);
constexpr auto refresh_min_gap = std::chrono::milliseconds(200);
constexpr auto refresh_period = std::chrono::seconds(5);
constexpr int max_redirects = 3;

std::string describe(const config::host_port& a) { return a.host + ":" + std::to_string(a.port); }

}  // namespace

std::shared_ptr<redis_cluster> redis_cluster::create(asio::any_io_executor ex, redis_connection_options base,
                                                     std::vector<config::host_port> seeds,
                                                     std::shared_ptr<redis_counters> counters) {
    return std::shared_ptr<redis_cluster>(
        new redis_cluster(std::move(ex), std::move(base), std::move(seeds), std::move(counters)));
}

redis_cluster::redis_cluster(asio::any_io_executor ex, redis_connection_options base,
                             std::vector<config::host_port> seeds, std::shared_ptr<redis_counters> counters)
    : ex_(std::move(ex)), base_(std::move(base)), seeds_(std::move(seeds)), counters_(std::move(counters)), wake_(ex_) {
    slots_.fill(-1);
}

void redis_cluster::start() {
    for (const auto& s : seeds_) node_at(s);
    asio::co_spawn(ex_, maintain(shared_from_this()), [](const std::exception_ptr& e) {
        if (!e) return;
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& ex) {
            spdlog::error("redis cluster: slot map upkeep ended: {}", ex.what());
        }
    });
}

void redis_cluster::stop() {
    if (stopped_) return;
    stopped_ = true;
    ready_.store(false, std::memory_order_release);
    wake_.cancel();
    for (auto& n : nodes_) n.conn->stop();
}

std::size_t redis_cluster::node_at(const config::host_port& a) {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i].address == a) return i;
    auto o = base_;
    o.host = a.host;
    o.port = a.port;
    nodes_.push_back({a, redis_connection::create(ex_, std::move(o), counters_)});
    if (!stopped_) nodes_.back().conn->start();
    return nodes_.size() - 1;
}

void redis_cluster::want_refresh() {
    if (refresh_wanted_) return;
    refresh_wanted_ = true;
    wake_.cancel();
}

std::optional<std::uint16_t> redis_cluster::slot_of(const limit::check_request& r, std::string_view key_prefix) const {
    if (r.keys.size() != 1) return std::nullopt;
    return cluster::key_slot(redis_script::key_name(key_prefix, r.keys[0]));
}

awaitable<redis_result> redis_cluster::call(std::uint16_t slot, std::string command, bool resend_on_noscript,
                                            redis_clock::time_point deadline) {
    std::int16_t asked = -1;  // after ASK: the node to ask
    redis_result res{redis_error::not_ready, nullptr};
    for (int attempt = 0; attempt <= max_redirects; ++attempt) {
        if (stopped_) co_return redis_result{redis_error::stopped, nullptr};
        const std::int16_t at = asked >= 0 ? asked : slots_[slot];
        if (at < 0) {
            want_refresh();
            co_return redis_result{redis_error::not_ready, nullptr};
        }
        auto conn = nodes_[static_cast<std::size_t>(at)].conn;
        res = co_await conn->call_formatted(command, resend_on_noscript, asked >= 0, deadline);
        if (!res.ok()) {
            want_refresh();  // the node may be gone: a replica may serve its slots soon
            co_return res;
        }
        auto r = cluster::parse_redirect(res.reply.get());
        if (!r) co_return res;
        counters_->redirects.add();
        const auto target = static_cast<std::int16_t>(node_at(r->target));
        if (r->what == cluster::redirect::kind::moved) {
            slots_[r->slot] = target;
            asked = -1;
            want_refresh();
        } else {
            if (asked >= 0) co_return res;  // ASK once
            asked = target;
        }
    }
    co_return res;
}

awaitable<void> redis_cluster::maintain(std::shared_ptr<redis_cluster> self) {
    auto last = redis_clock::time_point::min();
    while (!stopped_) {
        const auto now = redis_clock::now();
        if (last == redis_clock::time_point::min() || (refresh_wanted_ && now - last >= refresh_min_gap) ||
            now - last >= refresh_period) {
            refresh_wanted_ = false;
            last = now;
            try {
                co_await refresh();
            } catch (const std::exception& e) {  // allocation failure: try again later, do not end the upkeep
                spdlog::error("redis cluster: reading the slot map failed: {}", e.what());
                refresh_wanted_ = true;
            }
            if (stopped_) break;
        }
        update_ready();
        wake_.expires_after(tick);
        auto [ec] = co_await wake_.async_wait(use_tuple);
        (void)ec;  // cancelled by want_refresh() or stop(): look again
    }
    (void)self;
}

awaitable<void> redis_cluster::refresh() {
    std::shared_ptr<redis_connection> via;
    std::string via_host;
    for (const auto& n : nodes_) {
        if (n.conn->ready()) {
            via = n.conn;
            via_host = n.address.host;
            break;
        }
    }
    if (!via) {
        refresh_wanted_ = true;  // the seeds and known nodes are (re)connecting
        co_return;
    }
    std::vector<std::string> command{"CLUSTER", "SLOTS"};  // GCC 12 refuses a braced list in co_await
    auto res = co_await via->call(std::move(command));
    if (stopped_) co_return;
    auto ranges = res.ok() ? cluster::parse_slots(res.reply.get(), via_host) : std::nullopt;
    if (!ranges || ranges->empty()) {
        spdlog::warn("redis cluster: no slot map from {} ({})", via_host,
                     res.ok() ? "not a CLUSTER SLOTS reply" : to_string(res.failure));
        refresh_wanted_ = true;
        co_return;
    }
    counters_->slot_refreshes.add();
    install(*ranges);
}

void redis_cluster::install(const std::vector<cluster::slot_range>& ranges) {
    std::array<std::int16_t, cluster::slot_count> next;
    next.fill(-1);
    std::vector<std::string> primaries;
    for (const auto& r : ranges) {
        const auto i = static_cast<std::int16_t>(node_at(r.primary));
        for (std::size_t s = r.first; s <= r.last; ++s) next[s] = i;
        auto name = describe(r.primary);
        if (std::find(primaries.begin(), primaries.end(), name) == primaries.end()) primaries.push_back(name);
    }
    if (next != slots_) {
        std::size_t covered = 0;
        for (auto i : next) covered += i >= 0;
        spdlog::info("redis cluster: slot map read, {} of {} slots on {} primaries", covered, cluster::slot_count,
                     primaries.size());
    }
    slots_ = next;
    usable_.store(true, std::memory_order_release);
}

void redis_cluster::update_ready() {
    bool ok = usable_.load(std::memory_order_relaxed);
    std::vector<bool> checked(nodes_.size(), false);
    for (auto i : slots_) {
        if (!ok) break;
        if (i < 0) {
            ok = false;
        } else if (!checked[static_cast<std::size_t>(i)]) {
            checked[static_cast<std::size_t>(i)] = true;
            ok = nodes_[static_cast<std::size_t>(i)].conn->ready();
        }
    }
    ready_.store(ok && !stopped_, std::memory_order_release);
}

}  // namespace sluice::store
