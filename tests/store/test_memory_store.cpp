// The embedded store (store/memory_store.hpp) against a clock the test controls: limits per
// identifier, a request's keys decided together, LRU eviction per stripe, no state kept for
// denied newcomers, expiry without traffic; and a bounded multi-threaded run.
#include "store/memory_store.hpp"

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <latch>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace limit = sluice::limit;
namespace config = sluice::config;
using limit::usec;
using sluice::store::memory_store;

constexpr usec SEC = 1'000'000;
// 2023-11-14T21:00:00Z in microseconds: aligned to every window used here.
constexpr usec T0 = 1'699'995'600 * SEC;

limit::tier fixed_tier(const std::string& kind, std::int64_t n, std::int64_t per_ms) {
    config::tier_config c;
    std::string id = "mem/" + kind + "/fixed/" + std::to_string(per_ms) + "ms/" + std::to_string(n);
    std::string name = kind + "-" + std::to_string(per_ms) + "ms";
    c.kind = kind;
    c.limit = n;
    c.per = config::duration{per_ms};
    c.algo = config::algorithm::fixed;
    c.precision = c.per;
    return limit::tier::from(c, id, name);
}

// An identifier in a chosen stripe (the store picks the stripe from bytes 8 and 9), told
// apart from others by `n`.
limit::digest id_in(std::size_t stripe, std::uint32_t n) {
    limit::digest d{};
    d[0] = static_cast<std::uint8_t>(n);
    d[1] = static_cast<std::uint8_t>(n >> 8);
    d[2] = static_cast<std::uint8_t>(n >> 16);
    d[3] = static_cast<std::uint8_t>(n >> 24);
    d[8] = static_cast<std::uint8_t>(stripe);
    d[9] = 0;
    return d;
}

struct clocked_store {
    usec now = T0;
    memory_store store;
    explicit clocked_store(std::size_t max_keys) : store(max_keys, [this] { return now; }) {}

    limit::decision check(std::initializer_list<limit::store_key> keys, std::int64_t cost = 1) {
        std::vector<limit::store_key> v(keys);
        auto r = store.try_check({v, cost});
        REQUIRE(r);
        REQUIRE(r->state == limit::check_result::status::ok);
        return r->verdict;
    }
};

// The remaining count the verdict reports for key `k`'s first tier.
std::int64_t remaining_of(const limit::decision& d, std::size_t k) {
    for (const auto& t : d.tiers)
        if (t.key_index == k) return t.remaining;
    FAIL("no tier for key " << k);
    return -1;
}

}  // namespace

TEST_CASE("memory store: a limit is enforced per identifier, and a new window admits again") {
    clocked_store s(1000);
    const std::vector<limit::tier> ip{fixed_tier("ip", 3, 1000)};
    const limit::store_key a{sluice::identity::kind::ip, id_in(1, 1), ip},
        b{sluice::identity::kind::ip, id_in(1, 2), ip};

    for (int i = 0; i < 3; ++i) {
        auto d = s.check({a});
        CHECK(d.allowed);
        CHECK(remaining_of(d, 0) == 2 - i);
        s.now += 1000;
    }
    auto denied = s.check({a});
    CHECK_FALSE(denied.allowed);
    CHECK(denied.retry_after == T0 + SEC - s.now);  // the window's end
    CHECK(s.check({b}).allowed);                    // another identifier has its own count
    CHECK(s.check({b}).allowed);
    CHECK(s.check({b}).allowed);
    CHECK_FALSE(s.check({b}).allowed);
    // The same digest under the other kind is another identifier too.
    const limit::store_key a_as_user{sluice::identity::kind::user, a.id, ip};
    CHECK(s.check({a_as_user}).allowed);
    CHECK(s.store.keys_held() == 3);

    s.now = T0 + SEC;  // the next fixed window
    CHECK(s.check({a}).allowed);
}

TEST_CASE("memory store: a request's ip and user keys are decided together: one denying commits neither") {
    for (bool same_stripe : {true, false}) {
        CAPTURE(same_stripe);
        clocked_store s(1000);
        const std::vector<limit::tier> ip{fixed_tier("ip", 5, 60'000)}, user{fixed_tier("user", 2, 60'000)};
        const limit::store_key ip1{sluice::identity::kind::ip, id_in(3, 1), ip},
            ip2{sluice::identity::kind::ip, id_in(same_stripe ? 3 : 40, 2), ip};
        const limit::store_key u1{sluice::identity::kind::user, id_in(same_stripe ? 3 : 9, 1), user},
            u2{sluice::identity::kind::user, id_in(17, 2), user};

        CHECK(s.check({ip1, u1}).allowed);
        CHECK(s.check({ip1, u1}).allowed);
        // The user is out: denied, and ip1 is not charged for it.
        auto d = s.check({ip1, u1});
        CHECK_FALSE(d.allowed);
        REQUIRE(d.tiers.size() == 2);
        CHECK(d.tiers[0].admitted);
        CHECK_FALSE(d.tiers[1].admitted);
        auto after = s.check({ip1, u2});
        CHECK(after.allowed);
        CHECK(remaining_of(after, 0) == 5 - 3);  // two earlier admissions and this one
        CHECK(remaining_of(after, 1) == 1);

        // The other way round: the address is out, so the user is not charged.
        const std::vector<limit::tier> tight_ip{fixed_tier("ip", 1, 60'000)};
        const limit::store_key ip_once{sluice::identity::kind::ip, ip2.id, tight_ip},
            fresh_user{sluice::identity::kind::user, id_in(same_stripe ? 3 : 50, 3), user};
        CHECK(s.check({ip_once}).allowed);
        CHECK_FALSE(s.check({ip_once, fresh_user}).allowed);
        CHECK_FALSE(s.check({ip_once, fresh_user}).allowed);
        auto user_alone = s.check({fresh_user});
        CHECK(user_alone.allowed);
        CHECK(remaining_of(user_alone, 0) == 1);  // only this request counted
    }
}

TEST_CASE("memory store: beyond max_keys / 64 identifiers in a stripe, the least recently used is evicted") {
    clocked_store s(2 * memory_store::stripe_count);  // two identifiers per stripe
    const std::vector<limit::tier> ip{fixed_tier("ip", 1, 60'000)};
    const limit::store_key k1{sluice::identity::kind::ip, id_in(5, 1), ip},
        k2{sluice::identity::kind::ip, id_in(5, 2), ip}, k3{sluice::identity::kind::ip, id_in(5, 3), ip};
    const limit::store_key elsewhere{sluice::identity::kind::ip, id_in(6, 1), ip};

    CHECK(s.check({k1}).allowed);
    CHECK(s.check({k2}).allowed);
    CHECK(s.check({elsewhere}).allowed);  // another stripe: its own room
    CHECK(s.store.keys_held() == 3);
    CHECK(s.store.evictions() == 0);

    CHECK_FALSE(s.check({k1}).allowed);  // k1 used again (denied, but recently used): k2 is now the oldest
    CHECK(s.check({k3}).allowed);        // stripe 5 is full: k2 goes
    CHECK(s.store.evictions() == 1);
    CHECK(s.store.keys_held() == 3);

    CHECK_FALSE(s.check({k1}).allowed);  // k1 kept its state
    CHECK(s.check({k2}).allowed);        // k2 starts afresh (and evicts k3, now the oldest)
    CHECK(s.store.evictions() == 2);
    CHECK(s.check({k1}).allowed == false);
    CHECK_FALSE(s.check({elsewhere}).allowed);  // never touched by stripe 5's evictions
    CHECK(s.store.keys_held() == 3);

    // A bound below the stripe count still keeps one identifier per stripe.
    clocked_store small(10);
    CHECK(small.check({k1}).allowed);
    CHECK(small.check({k2}).allowed);
    CHECK(small.store.evictions() == 1);
    CHECK(small.store.keys_held() == 1);
}

TEST_CASE("memory store: an identifier first seen on a denied request is not kept") {
    clocked_store s(1000);
    const std::vector<limit::tier> ip{fixed_tier("ip", 10, 60'000)}, user{fixed_tier("user", 1, 60'000)};
    const limit::store_key u{sluice::identity::kind::user, id_in(7, 1), user};
    CHECK(s.check({{sluice::identity::kind::ip, id_in(7, 100), ip}, u}).allowed);
    CHECK(s.store.keys_held() == 2);

    // The user is out; every request comes from a new address (both stripes' and others').
    for (std::uint32_t n = 0; n < 200; ++n) {
        const limit::store_key fresh{sluice::identity::kind::ip, id_in(n % memory_store::stripe_count, 1000 + n), ip};
        CHECK_FALSE(s.check({fresh, u}).allowed);
    }
    CHECK(s.store.keys_held() == 2);
    CHECK(s.store.evictions() == 0);
}

TEST_CASE("memory store: collect_expired() drops identifiers whose windows have passed, with no new request") {
    clocked_store s(1000);
    const std::vector<limit::tier> second{fixed_tier("ip", 5, 1000)}, minute{fixed_tier("ip", 5, 60'000)};
    for (std::uint32_t n = 0; n < 20; ++n) CHECK(s.check({{sluice::identity::kind::ip, id_in(n, n), second}}).allowed);
    CHECK(s.check({{sluice::identity::kind::user, id_in(30, 1), minute}}).allowed);
    CHECK(s.store.keys_held() == 21);

    s.now = T0 + SEC - 1;  // the 1 s windows have not yet passed
    s.store.collect_expired();
    CHECK(s.store.keys_held() == 21);

    s.now = T0 + SEC;
    s.store.collect_expired();
    CHECK(s.store.keys_held() == 1);  // only the 1 min identifier is left

    s.now = T0 + 60 * SEC;
    s.store.collect_expired();
    CHECK(s.store.keys_held() == 0);
    CHECK(s.store.evictions() == 0);  // expiry is not eviction
}

TEST_CASE("memory store: concurrent checks on shared keys admit exactly the limit") {
    constexpr std::int64_t user_limit = 4000, ip_limit = 1500;
    constexpr int threads = 4, per_thread = 2000, addresses = 3;
    clocked_store s(1000);  // the clock stands still: one window throughout
    const std::vector<limit::tier> ip{fixed_tier("ip", ip_limit, 60'000)}, user{fixed_tier("user", user_limit, 60'000)};
    // One address shares the user's stripe, the others do not: both lock paths are taken. The
    // limits leave most checks contested: 8000 checks, 4000 admitted.
    const std::array<limit::store_key, addresses> ips{limit::store_key{sluice::identity::kind::ip, id_in(11, 1), ip},
                                                      {sluice::identity::kind::ip, id_in(12, 2), ip},
                                                      {sluice::identity::kind::ip, id_in(13, 3), ip}};
    const limit::store_key u{sluice::identity::kind::user, id_in(11, 9), user};

    std::atomic<std::int64_t> admitted{0}, errors{0};
    std::array<std::atomic<std::int64_t>, addresses> per_ip{};
    std::vector<std::thread> pool;
    std::latch start(threads);  // all threads contend from the first check
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            start.arrive_and_wait();
            for (int i = 0; i < per_thread; ++i) {
                const auto which = static_cast<std::size_t>(t + i) % addresses;
                const std::array<limit::store_key, 2> keys{ips[which], u};
                auto r = s.store.try_check({keys, 1});
                if (!r || r->state != limit::check_result::status::ok) {
                    ++errors;
                } else if (r->verdict.allowed) {
                    ++admitted;
                    ++per_ip[which];
                }
            }
        });
    }
    for (auto& th : pool) th.join();
    CHECK(errors == 0);
    CHECK(admitted == user_limit);  // the three addresses could take 4500: the user's 4000 binds
    for (const auto& n : per_ip) CHECK(n <= ip_limit);
    CHECK(s.store.keys_held() == addresses + 1);

    // And without the user: each address gets exactly its own limit.
    std::atomic<std::int64_t> alone{0};
    s.now = T0 + 60 * SEC;  // a fresh window
    pool.clear();
    std::latch again(threads);
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            again.arrive_and_wait();
            for (int i = 0; i < per_thread; ++i) {
                const std::array<limit::store_key, 1> keys{ips[static_cast<std::size_t>(t + i) % addresses]};
                auto r = s.store.try_check({keys, 1});
                if (r && r->verdict.allowed) ++alone;
            }
        });
    }
    for (auto& th : pool) th.join();
    CHECK(alone == addresses * ip_limit);
}

TEST_CASE("memory store: a lease renewed is a use: an identifier with requests in flight is not the one evicted") {
    clocked_store s(2 * memory_store::stripe_count);  // two identifiers per stripe
    config::tier_config c;
    c.kind = "ip";
    c.algo = config::algorithm::concurrency;
    c.limit = 1;
    c.per = config::duration{30'000};
    const std::vector<limit::tier> slots{limit::tier::from(c, "mem/ip/concurrency", "ip-concurrency")};
    const std::vector<limit::tier> ip{fixed_tier("ip", 5, 60'000)};
    const limit::store_key busy{sluice::identity::kind::ip, id_in(7, 1), slots},
        other{sluice::identity::kind::ip, id_in(7, 2), ip}, next{sluice::identity::kind::ip, id_in(7, 3), ip};
    const std::vector<limit::store_key> held{busy};

    auto taken = s.store.try_check({held, 1, false, 42});
    REQUIRE(taken);
    REQUIRE(taken->verdict.allowed);
    CHECK(s.check({other}).allowed);  // busy is now the least recently used...
    s.now += SEC;
    s.store.change_lease({held, 1, false, 42}, limit::lease_change::renew);  // ...until its renewal
    CHECK(s.check({next}).allowed);                                          // the stripe is full: `other` goes
    CHECK(s.store.evictions() == 1);
    auto again = s.store.try_check({held, 1, false, 43});  // the slot is still held
    REQUIRE(again);
    CHECK_FALSE(again->verdict.allowed);
    s.store.change_lease({held, 1, false, 42}, limit::lease_change::release);
    auto freed = s.store.try_check({held, 1, false, 43});
    REQUIRE(freed);
    CHECK(freed->verdict.allowed);
}

TEST_CASE("memory store: an admission's receipt, and take_back gives back exactly its charge whatever ran since") {
    clocked_store s(1000);
    const std::vector<limit::tier> ip{fixed_tier("ip", 5, 1000)}, user{fixed_tier("user", 4, 1000)};
    const std::vector<limit::store_key> keys{{sluice::identity::kind::ip, id_in(3, 1), ip},
                                             {sluice::identity::kind::user, id_in(5, 2), user}};
    limit::check_request r{keys, 2};
    r.want_receipt = true;
    auto first = s.store.try_check(r);
    REQUIRE(first);
    REQUIRE(first->verdict.allowed);
    CHECK(first->taken.at == std::vector<usec>{T0, T0});
    s.now += 100'000;
    CHECK(s.check({keys[0]}, 2).allowed);  // ip: 4 of 5
    CHECK_FALSE(s.check({keys[0], keys[1]}, 2).allowed);
    // Another identifier denied: nothing to receipt.
    auto denied = s.store.try_check(r);
    REQUIRE(denied);
    CHECK_FALSE(denied->verdict.allowed);
    CHECK(denied->taken.at.empty());

    s.store.take_back_now(r, first->taken, 2);
    CHECK(remaining_of(s.check({keys[0]}, 0), 0) == 3);  // the later 2 stay counted
    CHECK(remaining_of(s.check({keys[1]}, 0), 0) == 4);
    // A key no longer held (expired, evicted) has nothing to give back.
    const limit::store_key gone{sluice::identity::kind::ip, id_in(7, 9), ip};
    const std::vector<limit::store_key> other{gone};
    limit::receipt rc;
    rc.at = {T0};
    s.store.take_back_now({other, 1}, rc, 1);
    CHECK(s.store.keys_held() == 2);
}

TEST_CASE("memory store: take_back never takes more than the admission's cost, nor anything for an amount below 1") {
    clocked_store s(1000);
    const std::vector<limit::tier> ip{fixed_tier("ip", 9, 1000)};
    const std::vector<limit::store_key> keys{{sluice::identity::kind::ip, id_in(3, 1), ip}};
    limit::check_request r{keys, 2};
    r.want_receipt = true;
    auto first = s.store.try_check(r);
    REQUIRE(first);
    REQUIRE(first->verdict.allowed);
    CHECK(s.check({keys[0]}, 3).allowed);  // 5 of 9, in the same bucket
    CHECK_FALSE(s.store.take_back_now(r, first->taken, 0));
    CHECK_FALSE(s.store.take_back_now(r, first->taken, -3));
    CHECK(remaining_of(s.check({keys[0]}, 0), 0) == 4);
    // More than its cost: its cost, the other admission's 3 stay.
    CHECK(s.store.take_back_now(r, first->taken, 7));
    CHECK(remaining_of(s.check({keys[0]}, 0), 0) == 6);
}
