// Unit and property tests for limit::take_back: an admission's receipt (decide() fills it) and
// the exact taking back of what that admission committed, whatever ran since. The clock is
// the test's.
#include "decide_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace sluice::limit;
using namespace sluice::limit::decide_test;

namespace {

decision admit(const std::vector<key*>& keys, usec now, std::int64_t cost, receipt& rc) {
    std::vector<key_request> reqs;
    for (key* k : keys) reqs.push_back({&k->state, k->tiers});
    rc = {};
    return decide(reqs, now, cost, false, 0, &rc);
}

void give_back(const std::vector<key*>& keys, usec now, std::int64_t amount, const receipt& rc, bool whole = true) {
    std::vector<key_request> reqs;
    for (key* k : keys) reqs.push_back({&k->state, k->tiers});
    take_back(reqs, now, amount, rc, whole);
}

// What tier i of `k` holds at `now` as a probe of cost 0 on a copy sees it: limit (gcra: burst) -
// remaining.
std::int64_t used(const key& k, usec now, std::size_t i) {
    key copy = k;
    const auto d = run(copy, now, 0);
    for (const auto& r : d.tiers)
        if (r.t == &copy.tiers.at(i)) return (r.t->algo == algorithm::gcra ? r.t->burst : r.t->limit) - r.remaining;
    return -1;
}

}  // namespace

TEST_CASE("receipt: per key the instant its commit used (the key's clock), none on a denial") {
    key a({fixed_spec(5, 1000), gcra_spec(10, 1000, 2)}), b({as_user(log_spec(3, 1000))});
    receipt rc;
    REQUIRE(admit({&b}, T0 + 500 * MS, 1, rc).allowed);  // b's clock is now ahead of T0 + 100 ms
    REQUIRE(admit({&a, &b}, T0 + 100 * MS, 2, rc).allowed);
    CHECK(rc.at == std::vector<usec>{T0 + 100 * MS, T0 + 500 * MS});
    CHECK_FALSE(rc.local);
    REQUIRE_FALSE(admit({&b}, T0 + 600 * MS, 1, rc).allowed);  // b: 3 of 3
    CHECK(rc.at.empty());
}

TEST_CASE(
    "take_back: fixed, sliding and log give back exactly the amount, in the bucket or at the instant it was "
    "added") {
    key k({fixed_spec(5, 1000), sliding_spec(6, 1000, 100), log_spec(7, 1000)});
    receipt first, second;
    REQUIRE(admit({&k}, T0 + 50 * MS, 3, first).allowed);
    REQUIRE(admit({&k}, T0 + 250 * MS, 2, second).allowed);
    CHECK(used(k, T0 + 300 * MS, 0) == 5);
    CHECK(used(k, T0 + 300 * MS, 1) == 5);
    CHECK(used(k, T0 + 300 * MS, 2) == 5);
    // Another admission then the first taken back in part: 2 of its 3 come off, in its own
    // bucket and at its own instant.
    give_back({&k}, T0 + 300 * MS, 2, first);
    CHECK(used(k, T0 + 300 * MS, 0) == 3);
    CHECK(used(k, T0 + 300 * MS, 1) == 3);
    CHECK(used(k, T0 + 300 * MS, 2) == 3);
    // The first's remaining unit leaves the sliding window and the log with its bucket and
    // entry (bucket [0, 100 ms) at 1 s, the entry at 50 ms + 1 s), the second's later.
    CHECK(used(k, T0 + 999 * MS, 1) == 3);
    CHECK(used(k, T0 + 1'000 * MS, 1) == 2);
    CHECK(used(k, T0 + 1'049 * MS, 2) == 3);
    CHECK(used(k, T0 + 1'050 * MS, 2) == 2);
    // The rest of the first: its emptied bucket and entries are gone, and the resets no
    // longer count from them.
    give_back({&k}, T0 + 300 * MS, 1, first);
    CHECK(used(k, T0 + 300 * MS, 0) == 2);
    CHECK(used(k, T0 + 300 * MS, 1) == 2);
    CHECK(used(k, T0 + 300 * MS, 2) == 2);
    key copy = k;
    const auto d = run(copy, T0 + 300 * MS, 0);
    CHECK(d.tiers.at(1).reset == 1'200 * MS - 300 * MS);  // the second's bucket [200, 300) leaves at 1.2 s
    CHECK(d.tiers.at(2).reset == 1'250 * MS - 300 * MS);  // the second's entries, at 250 ms
}

TEST_CASE("take_back: a bucket or an entry no longer held is not taken from the others, never below 0") {
    key k({fixed_spec(5, 1000), log_spec(5, 1000)});
    receipt old_rc, rc;
    REQUIRE(admit({&k}, T0 + 100 * MS, 2, old_rc).allowed);
    REQUIRE(admit({&k}, T0 + 1'200 * MS, 3, rc).allowed);  // a new fixed window; the log's entries at 100 ms left
    give_back({&k}, T0 + 1'300 * MS, 2, old_rc);
    CHECK(used(k, T0 + 1'300 * MS, 0) == 3);
    CHECK(used(k, T0 + 1'300 * MS, 1) == 3);
    // A state that lost part of a bucket (the same admission taken back twice) stops at 0.
    give_back({&k}, T0 + 1'300 * MS, 3, rc);
    give_back({&k}, T0 + 1'300 * MS, 3, rc);
    CHECK(used(k, T0 + 1'300 * MS, 0) == 0);
    CHECK(used(k, T0 + 1'300 * MS, 1) == 0);
    CHECK(state_of(k, 0).data.empty());
}

TEST_CASE("take_back: two admissions at the same instant are taken back one by one, each its own amount") {
    key k({log_spec(10, 1000), fixed_spec(10, 1000)});
    receipt a, b;
    REQUIRE(admit({&k}, T0 + 10 * MS, 2, a).allowed);
    REQUIRE(admit({&k}, T0 + 10 * MS, 3, b).allowed);
    give_back({&k}, T0 + 20 * MS, 2, a);
    CHECK(used(k, T0 + 20 * MS, 0) == 3);
    CHECK(used(k, T0 + 20 * MS, 1) == 3);
    give_back({&k}, T0 + 20 * MS, 3, b);
    CHECK(used(k, T0 + 20 * MS, 0) == 0);
    CHECK(used(k, T0 + 20 * MS, 1) == 0);
}

TEST_CASE("take_back: gcra gives back the interval the admission added, never behind the present") {
    const tier g = make_tier(gcra_spec(10, 1000, 5));  // T = 100 ms, tolerance 500 ms
    const auto tat_of = [](const key& k) { return state_of(k, 0).data.at(0); };

    SUBCASE("right after: as if it had not been admitted") {
        key k({gcra_spec(10, 1000, 5)});
        receipt a, b;
        REQUIRE(admit({&k}, T0, 2, a).allowed);
        REQUIRE(admit({&k}, T0, 1, b).allowed);
        CHECK(tat_of(k) == T0 + 300 * MS);
        give_back({&k}, T0, 2, a);
        CHECK(tat_of(k) == T0 + 100 * MS);
        give_back({&k}, T0, 1, b);
        CHECK(tat_of(k) == T0);
    }
    SUBCASE("admissions after it: they move up by its interval") {
        key k({gcra_spec(10, 1000, 5)});
        receipt a, b;
        REQUIRE(admit({&k}, T0, 1, a).allowed);
        REQUIRE(admit({&k}, T0 + 10 * MS, 3, b).allowed);
        CHECK(tat_of(k) == T0 + 400 * MS);
        give_back({&k}, T0 + 50 * MS, 1, a);
        CHECK(tat_of(k) == T0 + 300 * MS);
    }
    SUBCASE("partly past: not behind the present") {
        key k({gcra_spec(10, 1000, 5)});
        receipt a;
        REQUIRE(admit({&k}, T0, 2, a).allowed);  // its interval: [T0, T0 + 200 ms)
        give_back({&k}, T0 + 150 * MS, 2, a);
        CHECK(tat_of(k) == T0 + 150 * MS);  // never behind the present
    }
    SUBCASE("wholly past, nothing since: nothing to give") {
        key k({gcra_spec(10, 1000, 5)});
        receipt a;
        REQUIRE(admit({&k}, T0, 1, a).allowed);
        give_back({&k}, T0 + 2 * SEC, 1, a);
        CHECK(tat_of(k) == T0 + 100 * MS);
        CHECK(used(k, T0 + 2 * SEC, 0) == 0);
    }
    SUBCASE("a partial amount") {
        key k({gcra_spec(10, 1000, 5)});
        receipt a;
        REQUIRE(admit({&k}, T0, 4, a).allowed);
        give_back({&k}, T0 + 100 * MS, 1, a);
        CHECK(tat_of(k) == T0 + 300 * MS);
        CHECK(used(k, T0 + 100 * MS, 0) == 2);
    }
    CHECK(g.interval == 100 * MS);
}

TEST_CASE("take_back: min_interval's mark goes with a whole take-back if no commit followed") {
    SUBCASE("taken back whole: admitted again at once") {
        key k({fixed_spec(10, 1000, 200)});
        receipt a;
        REQUIRE(admit({&k}, T0, 1, a).allowed);
        CHECK_FALSE(admits_on_copy(k, T0 + 50 * MS));
        give_back({&k}, T0 + 50 * MS, 1, a);
        CHECK(admits_on_copy(k, T0 + 50 * MS));
        CHECK(admits_on_copy(k, T0));  // at the same instant too
    }
    SUBCASE("in part: the admission stands, its mark too") {
        key k({log_spec(10, 1000, 200)});
        receipt a;
        REQUIRE(admit({&k}, T0, 3, a).allowed);
        give_back({&k}, T0 + 50 * MS, 2, a, false);
        CHECK_FALSE(admits_on_copy(k, T0 + 50 * MS));
        CHECK(used(k, T0 + 50 * MS, 0) == 1);
    }
    SUBCASE("a later admission keeps its own mark") {
        key k({gcra_spec(10, 1000, 5, 200)});
        receipt a, b;
        REQUIRE(admit({&k}, T0, 1, a).allowed);
        REQUIRE(admit({&k}, T0 + 250 * MS, 1, b).allowed);
        give_back({&k}, T0 + 260 * MS, 1, a);
        CHECK_FALSE(admits_on_copy(k, T0 + 300 * MS));
        CHECK(admits_on_copy(k, T0 + 450 * MS));
    }
}

TEST_CASE(
    "take_back: concurrency slots stay (a lease goes through release_lease); several keys, each at its own "
    "instant") {
    key a({log_spec(5, 1000), tier_spec{algorithm::concurrency, 2, 1000, 0, 0, "ip"}}),
        b({as_user(sliding_spec(5, 1000, 100))});
    receipt rb, rc;
    REQUIRE(admit({&b}, T0 + 400 * MS, 1, rb).allowed);  // b's clock ahead
    std::vector<key_request> reqs{{&a.state, a.tiers}, {&b.state, b.tiers}};
    REQUIRE(decide(reqs, T0 + 100 * MS, 2, false, 42, &rc).allowed);
    REQUIRE(rc.at == std::vector<usec>{T0 + 100 * MS, T0 + 400 * MS});
    give_back({&a, &b}, T0 + 500 * MS, 2, rc);
    CHECK(used(a, T0 + 500 * MS, 0) == 0);
    CHECK(state_of(a, 1).data.size() == 2);  // lease 42 still held
    CHECK(used(b, T0 + 500 * MS, 0) == 1);
}

namespace {

// The property: whatever runs between an admission and its take-back (other admissions,
// denials, other take-backs, time passing, callers whose clocks lag the key's), what every
// count-based tier holds is exactly the sum of what the admissions still charged put in its
// window.
struct charge {
    std::vector<usec> at;  // per key of the request (indexes into `keys`)
    std::vector<std::size_t> which;
    std::int64_t left = 0;
    receipt rc;
};

std::int64_t reference_used(const tier& t, std::size_t key_index, usec now, const std::vector<charge>& charges) {
    std::int64_t sum = 0;
    for (const auto& c : charges) {
        for (std::size_t i = 0; i < c.which.size(); ++i) {
            if (c.which[i] != key_index) continue;
            const usec at = c.at[i];
            bool live = false;
            switch (t.algo) {
                case algorithm::fixed: live = fdiv(at, t.bucket) == fdiv(now, t.bucket); break;
                case algorithm::sliding: live = fdiv(at, t.bucket) > fdiv(now, t.bucket) - t.buckets; break;
                case algorithm::log: live = at > now - t.per; break;
                default: break;
            }
            if (live) sum += c.left;
        }
    }
    return sum;
}

void run_take_back_property(std::vector<std::vector<tier_spec>> specs, std::uint32_t seed, int steps) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    std::vector<key> keys;
    for (const auto& s : specs) keys.emplace_back(s);
    std::vector<charge> charges;
    usec clock = T0;
    int admitted = 0, denied = 0, taken = 0, clamped = 0;
    for (int step = 0; step < steps; ++step) {
        CAPTURE(step);
        clock += std::uniform_int_distribution<usec>(0, 120 * MS)(rng);
        // A caller's clock may lag a key's by up to 200 ms: the commit then uses the key's.
        const usec now = clock - std::uniform_int_distribution<usec>(0, 3)(rng) * 50 * MS;
        if (!charges.empty() && rng() % 3 == 0) {
            auto& c = charges[rng() % charges.size()];
            if (c.left == 0) continue;
            const std::int64_t amount = std::uniform_int_distribution<std::int64_t>(1, c.left)(rng);
            std::vector<key*> ks;
            for (auto i : c.which) ks.push_back(&keys[i]);
            give_back(ks, now, amount, c.rc, amount == c.left);
            c.left -= amount;
            ++taken;
            // (A charge long past stays a while: taking it back must not touch newer ones.)
            std::erase_if(charges, [&](const charge& x) { return x.left == 0 || x.at[0] < clock - 3 * SEC; });
        } else {
            charge c;
            c.which.push_back(rng() % keys.size());
            if (keys.size() > 1 && rng() % 2 == 0) c.which.push_back((c.which[0] + 1) % keys.size());
            std::vector<key*> ks;
            for (auto i : c.which) {
                ks.push_back(&keys[i]);
                clamped += now < keys[i].state.last_time;
            }
            c.left = std::uniform_int_distribution<std::int64_t>(1, 3)(rng);
            if (admit(ks, now, c.left, c.rc).allowed) {
                REQUIRE(c.rc.at.size() == c.which.size());
                c.at = c.rc.at;
                charges.push_back(std::move(c));
                ++admitted;
            } else {
                REQUIRE(c.rc.at.empty());
                ++denied;
            }
        }
        for (std::size_t i = 0; i < keys.size(); ++i) {
            const usec at = std::max(clock, keys[i].state.last_time);
            for (std::size_t t = 0; t < keys[i].tiers.size(); ++t) {
                CAPTURE(keys[i].tiers[t].id);
                REQUIRE(used(keys[i], at, t) == reference_used(keys[i].tiers[t], i, at, charges));
            }
        }
    }
    INFO("admitted " << admitted << ", denied " << denied << ", taken back " << taken << ", clamped " << clamped);
    CHECK(admitted >= steps / 5);
    CHECK(denied >= steps / 20);
    CHECK(taken >= steps / 5);
    CHECK(clamped > 0);
}

}  // namespace

TEST_CASE(
    "property: after any trace of admissions, denials and take-backs, every count holds exactly what stays "
    "charged") {
    run_take_back_property({{fixed_spec(8, 1000), sliding_spec(10, 1000, 100), log_spec(9, 1000)}}, 0x7A4E0001, 3000);
    run_take_back_property({{fixed_spec(6, 500), log_spec(5, 700)}, {as_user(sliding_spec(7, 600, 200))}}, 0x7A4E0002,
                           3000);
}

TEST_CASE(
    "property: gcra - a take-back never raises tat, never leaves it behind the present, gives back amount * T "
    "short of it, and right after its admission is as if it had not run") {
    std::mt19937 rng(0x6C7A7A01);
    key k({gcra_spec(10, 1000, 5)});
    const usec T = k.tiers[0].interval;
    std::vector<std::pair<receipt, std::int64_t>> open;
    usec clock = T0;
    int exact = 0;
    for (int step = 0; step < 3000; ++step) {
        CAPTURE(step);
        clock += std::uniform_int_distribution<usec>(0, 150 * MS)(rng);
        receipt rc;
        const std::int64_t cost = std::uniform_int_distribution<std::int64_t>(1, 3)(rng);
        const key before = k;
        if (admit({&k}, clock, cost, rc).allowed) {
            if (rng() % 4 == 0) {  // at once: as if it never ran
                give_back({&k}, clock, cost, rc);
                REQUIRE(std::max(state_of(k, 0).data.at(0), clock) ==
                        std::max(state_of(before, 0).data.empty() ? clock : state_of(before, 0).data.at(0), clock));
                ++exact;
            } else {
                open.emplace_back(rc, cost);
            }
        }
        if (!open.empty() && rng() % 2 == 0) {
            const std::size_t i = rng() % open.size();
            const usec tat = state_of(k, 0).data.at(0), present = std::max(clock, k.state.last_time);
            give_back({&k}, clock, open[i].second, open[i].first);
            const usec after = state_of(k, 0).data.at(0);
            REQUIRE(after <= tat);
            REQUIRE(after >= std::min(tat, present));
            REQUIRE(tat - after == std::min(open[i].second * T, std::max<usec>(0, tat - present)));
            open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
    CHECK(exact > 100);
}
