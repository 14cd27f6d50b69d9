// The store.on_error local wrapper (store/fallback_store.hpp) over a shared store the test
// scripts (up, or failing at once or after a round trip) and a memory store on the test's
// clock: divided limits while the shared store fails, its answers again once it is back,
// the gateway-wide degraded state, and the divided tiers rebuilt after a reload.
#include "store/fallback_store.hpp"

#include <doctest/doctest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <string>
#include <vector>

namespace {

namespace limit = sluice::limit;
namespace config = sluice::config;
using limit::usec;
using sluice::store::fallback_state;
using sluice::store::fallback_store;
using sluice::store::memory_store;

constexpr usec SEC = 1'000'000;
constexpr usec T0 = 1'699'995'600 * SEC;  // aligned to the hour

limit::tier hourly(std::int64_t n) {
    config::tier_config c;
    std::string id = "fb/ip/fixed/1h/" + std::to_string(n);
    std::string name = "ip-1h";
    c.kind = "ip";
    c.limit = n;
    c.per = config::duration{3'600'000};
    c.algo = config::algorithm::fixed;
    c.precision = c.per;
    return limit::tier::from(c, id, name);
}

// A shared store that answers "allowed" after a round trip (as Redis does), fails at once (not
// connected) or fails after the round trip (a timeout).
struct scripted_store final : limit::store {
    enum class mode { up, down_at_once, down_after_round_trip } now = mode::up;
    int shared_answers = 0;
    int reloads = 0;
    std::optional<limit::check_result> try_check(const limit::check_request&) override {
        if (now == mode::down_at_once) return failed();
        return std::nullopt;
    }
    boost::asio::awaitable<limit::check_result> check(limit::check_request) override {
        if (now != mode::up) co_return failed();
        ++shared_answers;
        co_return limit::check_result{};
    }
    void change_lease(const limit::check_request&, limit::lease_change) override {}
    int take_backs = 0;
    boost::asio::awaitable<bool> take_back(limit::check_request, limit::receipt, std::int64_t) override {
        ++take_backs;
        const bool done = true;
        co_return done;
    }
    std::size_t keys_held() const override { return 0; }
    void on_reload() override { ++reloads; }
    bool ready() const override { return now == mode::up; }
    static limit::check_result failed() {
        limit::check_result r;
        r.state = limit::check_result::status::error;
        r.error = "redis not connected";
        return r;
    }
    boost::asio::awaitable<bool> reset(limit::check_request) override {
        const bool done = true;
        co_return done;
    }
};

struct fixture {
    usec clock = T0;
    scripted_store shared;
    memory_store local{1000, [this] { return clock; }};
    fallback_state state{2};
    fallback_store a{shared, local, state, std::chrono::seconds(0)};
    std::vector<limit::tier> tiers{hourly(10)};
    limit::store_key key{sluice::identity::kind::ip, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, tiers};

    limit::check_result ask(fallback_store& s) {
        auto r = s.try_check({std::span(&key, 1), 1});
        if (r) return *r;
        boost::asio::io_context ioc;
        auto f = boost::asio::co_spawn(ioc, s.check({std::span(&key, 1), 1}), boost::asio::use_future);
        ioc.run();
        return f.get();
    }
};

}  // namespace

TEST_CASE("fallback_store: the shared store's answers while it answers, none local") {
    fixture f;
    for (int i = 0; i < 20; ++i) CHECK(f.ask(f.a).verdict.allowed);
    CHECK(f.shared.shared_answers == 20);
    CHECK(f.a.counters().local_decisions.get() == 0);
    CHECK_FALSE(f.a.degraded());
    CHECK_FALSE(f.state.degraded());
    CHECK(f.local.keys_held() == 0);
}

TEST_CASE("fallback_store: shared store down - ceil(limit / fleet_size) locally, then back to shared") {
    fixture f;
    f.shared.now = scripted_store::mode::down_at_once;
    for (int i = 0; i < 5; ++i) {
        auto r = f.ask(f.a);
        REQUIRE(r.state == limit::check_result::status::ok);
        CHECK(r.verdict.allowed);
        CHECK(r.verdict.tiers.at(0).t->limit == 5);  // the headers show the local limit
    }
    auto denied = f.ask(f.a);
    CHECK_FALSE(denied.verdict.allowed);
    CHECK(denied.verdict.retry_after == 3600 * SEC);
    CHECK(f.a.degraded());
    CHECK(f.state.degraded());
    CHECK(f.a.counters().local_decisions.get() == 6);

    // A second worker shares the local memory store: the gateway's share is not per worker.
    fallback_store b{f.shared, f.local, f.state, std::chrono::seconds(0)};
    CHECK_FALSE(f.ask(b).verdict.allowed);
    CHECK(b.degraded());

    f.shared.now = scripted_store::mode::up;
    CHECK(f.ask(f.a).verdict.allowed);
    CHECK_FALSE(f.a.degraded());
    CHECK(f.state.degraded());  // b has not heard from the shared store yet
    CHECK(f.ask(b).verdict.allowed);
    CHECK_FALSE(f.state.degraded());
    CHECK(f.a.counters().local_decisions.get() == 6);
}

TEST_CASE("fallback_store: an error after the round trip (a timeout) is decided locally too") {
    fixture f;
    f.shared.now = scripted_store::mode::down_after_round_trip;
    for (int i = 0; i < 5; ++i) CHECK(f.ask(f.a).verdict.allowed);
    CHECK_FALSE(f.ask(f.a).verdict.allowed);
    CHECK(f.a.degraded());
}

TEST_CASE("fallback_store: a reload rebuilds the divided tiers and reaches the shared store") {
    fixture f;
    f.shared.now = scripted_store::mode::down_at_once;
    CHECK(f.ask(f.a).verdict.tiers.at(0).t->limit == 5);
    f.a.on_reload();
    CHECK(f.shared.reloads == 1);
    f.tiers[0] = hourly(4);  // the same list, another tier: the cache must not answer with the old one
    f.key.tiers = f.tiers;
    CHECK(f.ask(f.a).verdict.tiers.at(0).t->limit == 2);
}

TEST_CASE("fallback_store: a store failing now and then stays degraded until a quiet spell") {
    fixture f;
    fallback_store slow{f.shared, f.local, f.state, std::chrono::hours(1)};
    for (int i = 0; i < 10; ++i) {
        f.shared.now = i % 2 ? scripted_store::mode::up : scripted_store::mode::down_at_once;
        CHECK(f.ask(slow).state == limit::check_result::status::ok);
        CHECK(slow.degraded());  // one state change for the whole spell, not one per request
    }
    CHECK(f.shared.shared_answers == 5);  // every answer the store gave was used
}

TEST_CASE(
    "fallback_store: a local admission's receipt says so, and its take-back goes to the local store over the "
    "divided tiers") {
    fixture f;
    f.shared.now = scripted_store::mode::down_at_once;
    limit::check_request r{std::span(&f.key, 1), 2};
    r.want_receipt = true;
    auto admitted = f.a.try_check(r);
    REQUIRE(admitted);
    REQUIRE(admitted->verdict.allowed);
    CHECK(admitted->taken.local);
    CHECK(admitted->taken.at == std::vector<usec>{T0});
    CHECK(f.ask(f.a).verdict.tiers.at(0).remaining == 2);  // 5 locally, 3 used

    boost::asio::io_context ioc;
    auto done = boost::asio::co_spawn(ioc, f.a.take_back(r, admitted->taken, 2), boost::asio::use_future);
    ioc.run();
    CHECK(done.get());
    CHECK(f.ask(f.a).verdict.tiers.at(0).remaining == 3);  // only this check's own 1 since
    CHECK(f.shared.take_backs == 0);

    // A shared admission's receipt goes to the shared store.
    limit::receipt shared_rc;
    shared_rc.at = {T0};
    boost::asio::io_context ioc2;
    auto to_shared = boost::asio::co_spawn(ioc2, f.a.take_back(r, shared_rc, 1), boost::asio::use_future);
    ioc2.run();
    CHECK(to_shared.get());
    CHECK(f.shared.take_backs == 1);
}
