// What the admin API asks of the memory and fallback stores (store::reset, check_request
// query): a query reads the tiers as they stand and writes nothing, not even a new
// identifier; a reset forgets the chosen tiers of an identifier and drops one left with none.
// (The Redis store's: tests/store/test_redis_connection.cpp.)
#include "store/fallback_store.hpp"
#include "store/memory_store.hpp"

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

limit::tier tier_of(config::algorithm algo, std::int64_t n, const std::string& name) {
    config::tier_config c;
    c.kind = "ip";
    c.algo = algo;
    c.limit = n;
    c.per = config::duration{3'600'000};
    c.precision = algo == config::algorithm::sliding ? config::duration{360'000} : c.per;
    if (algo == config::algorithm::concurrency) c.per = config::duration{30'000};
    return limit::tier::from(c, "admin/ip/" + name, name);
}

template <class Awaitable>
auto wait(Awaitable a) {
    boost::asio::io_context ioc;
    auto f = boost::asio::co_spawn(ioc, std::move(a), boost::asio::use_future);
    ioc.run();
    return f.get();
}

struct fixture {
    usec clock = T0;
    memory_store store{1000, [this] { return clock; }};
    std::vector<limit::tier> tiers{tier_of(config::algorithm::log, 5, "log"),
                                   tier_of(config::algorithm::sliding, 10, "sliding"),
                                   tier_of(config::algorithm::concurrency, 3, "slots")};
    limit::store_key key{sluice::identity::kind::ip, {7, 1, 2, 3, 4, 5, 6, 7, 9, 0, 1, 2, 3, 4, 5, 6}, tiers};

    limit::check_result admit(std::uint64_t lease = 0) {
        limit::check_request r{std::span(&key, 1), 1};
        r.lease = lease;
        return *store.try_check(r);
    }
    limit::decision query() {
        limit::check_request r{std::span(&key, 1), 0};
        r.query = true;
        auto out = store.try_check(r);
        REQUIRE(out);
        REQUIRE(out->state == limit::check_result::status::ok);
        return out->verdict;
    }
};

}  // namespace

TEST_CASE("memory store: a query reads every tier as it stands and writes nothing") {
    fixture f;
    // Never seen: full quota, and still not held after the query.
    auto d = f.query();
    REQUIRE(d.tiers.size() == 3);
    CHECK(d.tiers[0].remaining == 5);
    CHECK(d.tiers[1].remaining == 10);
    CHECK(d.tiers[2].remaining == 3);
    CHECK(f.store.keys_held() == 0);

    for (int i = 0; i < 3; ++i) REQUIRE(f.admit().verdict.allowed);
    REQUIRE(f.admit(77).verdict.allowed);  // one slot held
    f.clock += 10 * SEC;
    for (int i = 0; i < 3; ++i) {
        d = f.query();
        CHECK(d.allowed);
        CHECK(d.tiers[0].remaining == 1);
        CHECK(d.tiers[0].reset == 3600 * SEC - 10 * SEC);
        CHECK(d.tiers[1].remaining == 6);
        CHECK(d.tiers[2].remaining == 2);  // the slot of lease 77
    }
    CHECK(f.admit().verdict.allowed);  // the 5th: the queries took none
    CHECK_FALSE(f.admit().verdict.allowed);
    d = f.query();
    CHECK(d.tiers[0].remaining == 0);
    CHECK(d.tiers[0].reset > 0);
}

TEST_CASE("memory store: a reset forgets the chosen tiers, and an identifier left with none") {
    fixture f;
    for (int i = 0; i < 4; ++i) REQUIRE(f.admit().verdict.allowed);
    REQUIRE(f.store.keys_held() == 1);
    // The log tier alone.
    limit::store_key only_log = f.key;
    only_log.tiers = std::span(f.tiers.data(), 1);
    CHECK(wait(f.store.reset({std::span(&only_log, 1), 1})));
    auto d = f.query();
    CHECK(d.tiers[0].remaining == 5);
    CHECK(d.tiers[0].reset == 0);
    CHECK(d.tiers[1].remaining == 6);
    CHECK(f.store.keys_held() == 1);
    // Every tier: the identifier goes.
    CHECK(wait(f.store.reset({std::span(&f.key, 1), 1})));
    CHECK(f.store.keys_held() == 0);
    CHECK(f.query().tiers[1].remaining == 10);
    // An identifier never seen: nothing to do, done.
    limit::store_key other = f.key;
    other.id[0] = 99;
    CHECK(wait(f.store.reset({std::span(&other, 1), 1})));
}

namespace {

// A shared store that fails every call (Redis down), counting resets.
struct down_store final : limit::store {
    int resets = 0;
    std::optional<limit::check_result> try_check(const limit::check_request&) override {
        limit::check_result r;
        r.state = limit::check_result::status::error;
        r.error = "redis not connected";
        return r;
    }
    boost::asio::awaitable<limit::check_result> check(limit::check_request r) override { co_return *try_check(r); }
    void change_lease(const limit::check_request&, limit::lease_change) override {}
    boost::asio::awaitable<bool> reset(limit::check_request) override {
        ++resets;
        const bool done = false;
        co_return done;
    }
    boost::asio::awaitable<bool> take_back(limit::check_request, limit::receipt, std::int64_t) override {
        const bool done = false;
        co_return done;
    }
    std::size_t keys_held() const override { return 0; }
};

}  // namespace

TEST_CASE(
    "fallback store: a query the shared store cannot answer reads the local one, not degrading, and a reset "
    "reaches both") {
    usec clock = T0;
    down_store shared;
    memory_store local{1000, [&] { return clock; }};
    fallback_state state{2};
    fallback_store s{shared, local, state, std::chrono::seconds(0)};
    std::vector<limit::tier> tiers{tier_of(config::algorithm::log, 10, "log")};
    limit::store_key key{sluice::identity::kind::ip, {3}, tiers};
    // Decided locally over the divided tier (10 / 2 = 5): 2 admitted.
    for (int i = 0; i < 2; ++i) REQUIRE(s.try_check({std::span(&key, 1), 1})->verdict.allowed);
    REQUIRE(s.degraded());
    const auto local_decisions = s.counters().local_decisions.get();
    limit::check_request q{std::span(&key, 1), 0};
    q.query = true;
    auto d = s.try_check(q);
    REQUIRE(d);
    REQUIRE(d->state == limit::check_result::status::ok);
    CHECK(d->verdict.tiers.at(0).remaining == 3);
    CHECK(d->verdict.tiers.at(0).t->limit == 5);
    CHECK(s.counters().local_decisions.get() == local_decisions);  // a query is no decision
    // A reset: the local state goes; the answer is the shared store's (which failed).
    CHECK_FALSE(wait(s.reset({std::span(&key, 1), 1})));
    CHECK(shared.resets == 1);
    CHECK(s.try_check(q)->verdict.tiers.at(0).remaining == 5);
}
