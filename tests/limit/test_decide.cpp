// Unit and property tests for limit::decide, the one function that holds the semantics of
// every limit (docs/design.md, "Limits and the data model"). The clock is the test's: plain
// microsecond values, no sleeping.
#include "decide_support.hpp"

#include "limit/rate_limit_fields.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::limit;
using namespace sluice::limit::decide_test;

namespace {

// Asserts a denial with the given retry_after, that the denial wrote nothing, and that the
// retry_after is exact. Returns the decision for further checks.
decision expect_denied(key& k, usec now, std::int64_t cost, usec retry) {
    const std::string before = dump(k.state);
    auto d = run(k, now, cost);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after == retry);
    CHECK(dump(k.state) == before);
    CHECK(retry_problem(k, now, cost, d.retry_after) == "");
    return d;
}

decision expect_allowed(key& k, usec now, std::int64_t cost = 1) {
    auto d = run(k, now, cost);
    CHECK(d.allowed);
    CHECK(d.retry_after == 0);
    return d;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// tier::from

TEST_CASE("tier::from: durations in microseconds and the derived values") {
    auto f = make_tier(fixed_spec(5, 1000, 20));
    CHECK(f.algo == algorithm::fixed);
    CHECK(f.limit == 5);
    CHECK(f.per == SEC);
    CHECK(f.bucket == SEC);
    CHECK(f.buckets == 1);
    CHECK(f.min_interval == 20 * MS);

    auto s = make_tier(sliding_spec(10, 1000, 100));
    CHECK(s.bucket == 100 * MS);
    CHECK(s.buckets == 10);

    auto g = make_tier(gcra_spec(3, 1000, 2));
    CHECK(g.interval == 333'334);  // ceil(1e6 / 3): rounded up, never more than limit per per
    CHECK(g.tolerance == 2 * 333'334);
    CHECK(make_tier(gcra_spec(7, 1000, 1)).interval == 142'858);
    CHECK(make_tier(gcra_spec(10, 1000, 1)).interval == 100'000);

    auto l = make_tier(log_spec(5, 1000));
    CHECK(l.per == SEC);
    CHECK(f.key != s.key);
    CHECK(f.key == tier_key_of(f.id));
}

TEST_CASE(
    "tier::divided: limit and burst divided by the fleet size, rounded up, min_interval multiplied, derived values "
    "follow") {
    auto s = make_tier(sliding_spec(10, 3'600'000, 360'000, 20)).divided(2);
    CHECK(s.limit == 5);
    CHECK(s.bucket == 360 * SEC);
    CHECK(s.buckets == 10);
    CHECK(s.min_interval == 40 * MS);  // n gateways: n times as long between two, each
    CHECK(s.horizon == HOUR);
    CHECK(make_tier(fixed_spec(10, 1000)).divided(3).limit == 4);  // ceil(10 / 3)
    CHECK(make_tier(log_spec(10, 1000)).divided(10).limit == 1);   // ceil(10 / 10)
    CHECK(make_tier(log_spec(10, 1000)).divided(11).limit == 1);   // never 0
    CHECK(make_tier(fixed_spec(7, 1000)).divided(1).limit == 7);

    // gcra: 10 per 1s, burst 5, in a fleet of 3 -> 4 per 1s, burst 2: T and tolerance from the divided limit.
    auto g = make_tier(gcra_spec(10, 1000, 5)).divided(3);
    CHECK(g.limit == 4);
    CHECK(g.burst == 2);
    CHECK(g.interval == 250'000);
    CHECK(g.tolerance == 500'000);
    CHECK(g.horizon == SEC);
    auto same = make_tier(gcra_spec(4, 1000, 2));
    CHECK(g.interval == same.interval);
    CHECK(g.tolerance == same.tolerance);
    // A divided tier keeps its id, key and name: it is the same tier, decided locally.
    auto orig = make_tier(gcra_spec(10, 1000, 5));
    CHECK(g.id == orig.id);
    CHECK(g.key == orig.key);
    CHECK(g.name == orig.name);
    // A long tolerance sets the horizon: 3 per 1s with burst 30, halved -> T 500 ms, tolerance 7.5 s.
    auto h = make_tier(gcra_spec(3, 1000, 30)).divided(2);
    CHECK(h.interval == 500'000);
    CHECK(h.tolerance == 7'500'000);
    CHECK(h.horizon == 7'500'000);
}

TEST_CASE("tier::divided: a divided sliding tier admits ceil(limit / n) in its window") {
    key k;
    k.tiers.push_back(make_tier(sliding_spec(10, 3'600'000, 360'000)).divided(2));
    for (int i = 0; i < 5; ++i) expect_allowed(k, T0 + i * SEC);
    auto d = run(k, T0 + 5 * SEC, 1);
    CHECK_FALSE(d.allowed);
    CHECK(d.tiers.at(0).t->limit == 5);
}

// ---------------------------------------------------------------------------------------
// 1. Edges, per algorithm

TEST_CASE("fixed: limit per aligned bucket - exact edges - 2x limit across an edge") {
    key k({fixed_spec(5, 1000)});

    SUBCASE("within one bucket, then the next bucket") {
        auto d = expect_allowed(k, T0 + 250 * MS);
        REQUIRE(d.tiers.size() == 1);
        CHECK(d.tiers[0].admitted);
        CHECK(d.tiers[0].remaining == 4);
        CHECK(d.tiers[0].reset == 750 * MS);  // the bucket ends at T0 + 1 s
        const usec times[] = {T0 + 500 * MS, T0 + 900 * MS, T0 + SEC - 2, T0 + SEC - 1};
        std::int64_t left = 3;
        for (usec t : times) {
            d = expect_allowed(k, t);
            CHECK(d.tiers[0].remaining == left--);
        }
        CHECK(state_of(k, 0).data == std::vector<std::int64_t>{T0 / SEC, 5});

        // The 6th, 1 µs before the edge: denied until exactly the bucket start.
        d = expect_denied(k, T0 + SEC - 1, 1, 1);
        CHECK_FALSE(d.tiers[0].admitted);
        CHECK(d.tiers[0].remaining == 0);
        CHECK(d.tiers[0].reset == 1);
        // Earlier in the bucket: the same instant, further away.
        key other({fixed_spec(5, 1000)});
        expect_allowed(other, T0 + 100 * MS, 5);
        expect_denied(other, T0 + 600 * MS, 1, 400 * MS);

        // Exactly at the bucket start: a fresh bucket.
        d = expect_allowed(k, T0 + SEC);
        CHECK(d.tiers[0].remaining == 4);
        CHECK(d.tiers[0].reset == SEC);
        CHECK(state_of(k, 0).data == std::vector<std::int64_t>{T0 / SEC + 1, 1});
    }

    SUBCASE("up to 2x limit across a bucket edge") {
        for (int i = 0; i < 5; ++i) expect_allowed(k, T0 + SEC - 1);
        for (int i = 0; i < 5; ++i) expect_allowed(k, T0 + SEC);
        // 10 admitted within 2 µs; the 11th waits for the bucket after.
        expect_denied(k, T0 + SEC, 1, SEC);
    }

    SUBCASE("buckets are aligned to Unix time, not to the first request") {
        expect_allowed(k, T0 + SEC - 1, 5);
        expect_denied(k, T0 + SEC - 1, 1, 1);
        expect_allowed(k, T0 + SEC, 5);
    }
}

namespace {

tier calendar(std::int64_t limit, bool month, std::int64_t per_ms, std::int64_t offset_ms) {
    sluice::config::tier_config c;
    c.kind = "ip";
    c.limit = limit;
    c.algo = algorithm::fixed;
    c.month = month;
    c.per = sluice::config::duration{month ? 31 * 24 * 3'600'000LL : per_ms};
    c.precision = c.per;
    c.window_offset = sluice::config::duration{offset_ms};
    return tier::from(c, "t", "t");
}

constexpr usec DAY = 24 * HOUR;

}  // namespace

TEST_CASE("calendar months: month_of and month_start agree with the calendar, leap years included") {
    // 2024-02-29T23:59:59.999999Z is February 2024; 2024-03-01T00:00:00Z starts March.
    const usec march_2024 = 1'709'251'200 * SEC;
    CHECK(month_of(march_2024 - 1) == 2024 * 12 + 1);
    CHECK(month_of(march_2024) == 2024 * 12 + 2);
    CHECK(month_start(2024 * 12 + 2) == march_2024);
    CHECK(month_start(2024 * 12 + 2) - month_start(2024 * 12 + 1) == 29 * DAY);  // leap February
    CHECK(month_start(2023 * 12 + 2) - month_start(2023 * 12 + 1) == 28 * DAY);
    CHECK(month_start(2100 * 12 + 2) - month_start(2100 * 12 + 1) == 28 * DAY);  // not a leap year
    CHECK(month_start(2000 * 12 + 2) - month_start(2000 * 12 + 1) == 29 * DAY);  // a leap year
    CHECK(month_start(1970 * 12) == 0);
    CHECK(month_of(-1) == 1969 * 12 + 11);
    for (std::int64_t m = 1969 * 12; m < 2200 * 12; ++m) {
        CHECK(month_of(month_start(m)) == m);
        CHECK(month_of(month_start(m) - 1) == m - 1);
    }
}

TEST_CASE("fixed per month: the quota resets at the calendar month's start, and says exactly when") {
    key k;
    k.tiers.push_back(calendar(3, true, 0, 0));
    const usec march = 1'709'251'200 * SEC, april = march + 31 * DAY;
    auto d = expect_allowed(k, march + 10 * DAY, 2);
    CHECK(d.tiers[0].remaining == 1);
    CHECK(d.tiers[0].reset == 21 * DAY);  // until 2024-04-01T00:00Z
    expect_allowed(k, april - 1);
    expect_denied(k, april - 1, 1, 1);
    d = expect_allowed(k, april, 3);
    CHECK(d.tiers[0].reset == 30 * DAY);  // April has 30 days
    expect_denied(k, april + 5 * DAY, 1, 25 * DAY);
}

TEST_CASE("window_offset: days and months counted in the customer's time zone") {
    const usec march = 1'709'251'200 * SEC;  // 2024-03-01T00:00Z: still 29 February, 19:00, at UTC-5
    SUBCASE("per 1d at -5h: the day starts at 05:00 UTC") {
        key k;
        k.tiers.push_back(calendar(2, false, 24 * 3'600'000, -5 * 3'600'000));
        auto d = expect_allowed(k, march + 4 * HOUR, 2);
        CHECK(d.tiers[0].reset == HOUR);
        expect_denied(k, march + 5 * HOUR - 1, 1, 1);
        d = expect_allowed(k, march + 5 * HOUR);
        CHECK(d.tiers[0].reset == DAY);
    }
    SUBCASE("per month at -5h: March starts at 05:00 UTC on the 1st") {
        key k;
        k.tiers.push_back(calendar(1, true, 0, -5 * 3'600'000));
        expect_allowed(k, march + HOUR);  // still February at UTC-5
        expect_denied(k, march + 2 * HOUR, 1, 3 * HOUR);
        auto d = expect_allowed(k, march + 5 * HOUR);
        CHECK(d.tiers[0].reset == 31 * DAY);
    }
    SUBCASE("per 1h at +30m: hours start at half past") {
        key k;
        k.tiers.push_back(calendar(1, false, 3'600'000, 30 * 60'000));
        expect_allowed(k, march + 29 * 60 * SEC);
        expect_denied(k, march + 29 * 60 * SEC, 1, 60 * SEC);
        expect_allowed(k, march + 30 * 60 * SEC);
    }
}

TEST_CASE("count_rejected: a refusal is counted, and the retry is computed on what it left") {
    key plain({sliding_spec(2, 1000, 100)});
    key penal({sliding_spec(2, 1000, 100)});
    const auto run_penal = [&](usec now) {
        const std::vector<key_request> reqs{{&penal.state, penal.tiers}};
        return decide(reqs, now, 1, true);
    };
    for (key* k : {&plain, &penal}) {
        expect_allowed(*k, T0);
        expect_allowed(*k, T0);
    }
    // Refused at 500 ms either way, and admitted at 1 s if nothing else comes.
    expect_denied(plain, T0 + 500 * MS, 1, 500 * MS);
    auto d = run_penal(T0 + 500 * MS);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after == 500 * MS);
    CHECK(d.tiers[0].remaining == -1);  // counted past the limit (the headers show 0)
    // Hammering: every refusal counts, so at 1 s, where the plain key is admitted, it is not.
    for (usec t = T0 + 600 * MS; t < T0 + SEC; t += 100 * MS) CHECK_FALSE(run_penal(t).allowed);
    CHECK(admits_on_copy(plain, T0 + SEC));
    d = run_penal(T0 + SEC);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after == 900 * MS);  // when the refusal at 900 ms leaves the window
    CHECK(retry_problem(penal, T0 + SEC, 1, d.retry_after).empty());
    // Resting a whole window after the last refusal lets it in.
    CHECK(run_penal(T0 + 2 * SEC).allowed);
}

TEST_CASE("count_rejected on gcra: each refusal pushes the wait, and the state lives as long as it") {
    key k({gcra_spec(1, 10'000, 1)});
    const auto run_penal = [&](usec now) {
        const std::vector<key_request> reqs{{&k.state, k.tiers}};
        return decide(reqs, now, 1, true);
    };
    CHECK(run_penal(T0).allowed);
    usec retry = 0;
    for (int i = 1; i <= 3; ++i) {
        auto d = run_penal(T0 + i * SEC);
        CHECK_FALSE(d.allowed);
        CHECK(d.retry_after == (10 * (i + 1) - i) * SEC);  // 19 s, 28 s, 37 s
        retry = d.retry_after;
    }
    CHECK(retry_problem(k, T0 + 3 * SEC, 1, retry).empty());
    // A store forgets a key at `expires`: not before the penalty is served.
    CHECK(k.state.expires >= T0 + 3 * SEC + retry);
}

TEST_CASE("sliding: 10 per 1s with precision 100ms - admitted exactly when the oldest bucket leaves") {
    key k({sliding_spec(10, 1000, 100)});
    const usec B = T0;  // bucket b0 = [B, B+100ms), b3 = [B+300ms, ...), b7 = [B+700ms, ...)

    auto d = expect_allowed(k, B + 50 * MS);
    CHECK(d.tiers[0].remaining == 9);
    CHECK(d.tiers[0].reset == 950 * MS);  // b0 leaves the window at B + 1 s
    expect_allowed(k, B + 60 * MS);
    expect_allowed(k, B + 99'999);  // still b0
    for (int i = 0; i < 4; ++i) d = expect_allowed(k, B + 350 * MS);
    CHECK(d.tiers[0].remaining == 3);
    CHECK(d.tiers[0].reset == 650 * MS);
    for (int i = 0; i < 3; ++i) d = expect_allowed(k, B + 720 * MS);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(d.tiers[0].reset == 280 * MS);
    const std::int64_t b0 = B / (100 * MS);
    CHECK(state_of(k, 0).data == std::vector<std::int64_t>{b0, 3, b0 + 3, 4, b0 + 7, 3});

    // Full: a request waits for the oldest bucket(s) to leave.
    d = expect_denied(k, B + 900 * MS, 1, 100 * MS);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(d.tiers[0].reset == 100 * MS);
    // cost 5: dropping b0 frees 3 (not enough), b3 frees 4 more: admitted when b3 leaves.
    expect_denied(k, B + 900 * MS, 5, 400 * MS);
    // cost 8: b0, b3 and b7 must all leave.
    expect_denied(k, B + 900 * MS, 8, 800 * MS);
    expect_denied(k, B + SEC - 1, 1, 1);

    // At B + 1 s, b0 has left: 7 remain in the window.
    d = expect_allowed(k, B + SEC);
    CHECK(d.tiers[0].remaining == 2);
    CHECK(d.tiers[0].reset == 300 * MS);  // b3 is now the oldest, it leaves at B + 1.3 s
    expect_allowed(k, B + SEC);
    expect_allowed(k, B + SEC);
    expect_denied(k, B + SEC, 1, 300 * MS);
    expect_denied(k, B + 1300 * MS - 1, 1, 1);
    d = expect_allowed(k, B + 1300 * MS);
    CHECK(d.tiers[0].remaining == 10 - 3 - 3 - 1);  // b7 (3) + b10 (3) + this one
    // Old buckets are dropped from the state on commit.
    CHECK(state_of(k, 0).data == std::vector<std::int64_t>{b0 + 7, 3, b0 + 10, 3, b0 + 13, 1});

    // An idle window: everything has left.
    d = expect_allowed(k, B + 10 * SEC, 10);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(state_of(k, 0).data == std::vector<std::int64_t>{b0 + 100, 10});
}

TEST_CASE("gcra: burst then the steady rate - exact tat arithmetic") {
    key k({gcra_spec(10, 1000, 3)});
    const usec T = 100 * MS;
    const usec t0 = T0 + 123;

    auto d = expect_allowed(k, t0);
    CHECK(d.tiers[0].remaining == 2);
    CHECK(d.tiers[0].reset == T);
    CHECK(state_of(k, 0).data == std::vector<std::int64_t>{t0 + T});
    CHECK(expect_allowed(k, t0).tiers[0].remaining == 1);
    d = expect_allowed(k, t0);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(d.tiers[0].reset == T);
    CHECK(state_of(k, 0).data == std::vector<std::int64_t>{t0 + 3 * T});

    // The burst is spent: max(tat, now) + T - 3T = t0 + T.
    d = expect_denied(k, t0, 1, T);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(d.tiers[0].reset == T);
    expect_denied(k, t0 + 50 * MS, 1, 50 * MS);
    expect_denied(k, t0, 2, 2 * T);

    // Steady rate: one every T, each admitted exactly on time and not 1 µs earlier.
    for (int i = 1; i <= 20; ++i) {
        CAPTURE(i);
        expect_denied(k, t0 + i * T - 1, 1, 1);
        d = expect_allowed(k, t0 + i * T);
        CHECK(d.tiers[0].remaining == 0);
        CHECK(state_of(k, 0).data == std::vector<std::int64_t>{t0 + (i + 3) * T});
    }

    // Idle until tat: the full burst is back. 1 µs before tat only 2 of 3 fit.
    const usec tat = t0 + 23 * T;
    {
        key early = k;
        expect_allowed(early, tat - 1);
        expect_allowed(early, tat - 1);
        expect_denied(early, tat - 1, 1, 1);
    }
    expect_allowed(k, tat);
    expect_allowed(k, tat);
    d = expect_allowed(k, tat);
    CHECK(d.tiers[0].remaining == 0);
    expect_denied(k, tat, 1, T);
}

TEST_CASE("gcra: T rounds up when per/limit is not integral - 3 per 1s gives T = 333334 us") {
    key k({gcra_spec(3, 1000, 1)});
    const usec t0 = T0;
    expect_allowed(k, t0);
    CHECK(state_of(k, 0).data == std::vector<std::int64_t>{t0 + 333'334});
    expect_denied(k, t0 + 1, 1, 333'333);
    expect_allowed(k, t0 + 333'334);
    expect_allowed(k, t0 + 666'668);
    // A 4th in the same second would over-admit: tat is t0 + 1000002.
    expect_denied(k, t0 + SEC, 1, 2);
    expect_allowed(k, t0 + SEC + 2);
}

TEST_CASE("log: exact rolling window - a request of cost c adds c entries") {
    key k({log_spec(5, 1000)});
    const usec t0 = T0 + 77;

    auto d = expect_allowed(k, t0, 2);
    CHECK(d.tiers[0].remaining == 3);
    CHECK(d.tiers[0].reset == SEC);
    CHECK(state_of(k, 0).data == std::vector<std::int64_t>{t0, t0});
    d = expect_allowed(k, t0 + 300 * MS, 3);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(d.tiers[0].reset == 700 * MS);
    CHECK(state_of(k, 0).data.size() == 5);

    // The (count + cost - limit)-th oldest entry + per.
    d = expect_denied(k, t0 + 500 * MS, 1, 500 * MS);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(d.tiers[0].reset == 500 * MS);
    expect_denied(k, t0 + 500 * MS, 2, 500 * MS);
    expect_denied(k, t0 + 500 * MS, 3, 800 * MS);
    expect_denied(k, t0 + 500 * MS, 5, 800 * MS);
    expect_denied(k, t0 + SEC - 1, 1, 1);

    // At t0 + 1 s both entries of t0 are gone (an entry counts while now < ts + per).
    d = expect_allowed(k, t0 + SEC, 2);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(state_of(k, 0).data ==
          std::vector<std::int64_t>{t0 + 300 * MS, t0 + 300 * MS, t0 + 300 * MS, t0 + SEC, t0 + SEC});
    // Exact to the microsecond, unlike sliding's bucket granularity.
    expect_denied(k, t0 + 1300 * MS - 1, 1, 1);
    expect_allowed(k, t0 + 1300 * MS, 3);
    expect_denied(k, t0 + 1300 * MS, 1, 700 * MS);
}

// ---------------------------------------------------------------------------------------
// 2. Cost

TEST_CASE("cost: weighted requests against limit 10 and cost equal to the limit") {
    const tier_spec specs[] = {fixed_spec(10, 1000), sliding_spec(10, 1000, 100), gcra_spec(10, 1000, 10),
                               log_spec(10, 1000)};
    for (const auto& spec : specs) {
        CAPTURE(sluice::config::to_string(spec.algo));
        const usec t0 = T0 + 250 * MS;
        {
            key k({spec});
            CHECK(expect_allowed(k, t0, 5).tiers[0].remaining == 5);
            // A denied cost 6 counts nothing: a cost 5 still fits.
            auto d = run(k, t0, 6);
            CHECK_FALSE(d.allowed);
            CHECK(d.tiers[0].remaining == 5);
            CHECK(retry_problem(k, t0, 6, d.retry_after) == "");
            CHECK(expect_allowed(k, t0, 5).tiers[0].remaining == 0);
            d = run(k, t0, 1);
            CHECK_FALSE(d.allowed);
            CHECK(retry_problem(k, t0, 1, d.retry_after) == "");
        }
        {
            key k({spec});
            CHECK(expect_allowed(k, t0, 10).tiers[0].remaining == 0);
            auto d = run(k, t0 + 1, 1);
            CHECK_FALSE(d.allowed);
            CHECK(retry_problem(k, t0 + 1, 1, d.retry_after) == "");
            d = run(k, t0 + 1, 10);
            CHECK_FALSE(d.allowed);
            CHECK(retry_problem(k, t0 + 1, 10, d.retry_after) == "");
        }
    }
    // The retry of a weighted request, algorithm by algorithm.
    {
        key k({gcra_spec(10, 1000, 10)});  // T = 100 ms
        expect_allowed(k, T0, 5);
        expect_denied(k, T0, 6, 100 * MS);   // tat + 6T - 10T = T0 + T
        expect_denied(k, T0, 10, 500 * MS);  // the whole burst back: tat
        expect_allowed(k, T0, 5);
        expect_denied(k, T0 + 10 * MS, 1, 90 * MS);
    }
    {
        key k({fixed_spec(10, 1000)});
        expect_allowed(k, T0 + 100 * MS, 5);
        expect_allowed(k, T0 + 200 * MS, 4);
        expect_denied(k, T0 + 300 * MS, 2, 700 * MS);
        expect_allowed(k, T0 + 300 * MS, 1);
    }
}

// ---------------------------------------------------------------------------------------
// 3. Several tiers, several keys

TEST_CASE("several tiers in one key: the tightest denies - nothing is committed partially") {
    // 10/1s sliding (100 ms) + 120/1m fixed + 240/1h sliding (1 m).
    key k({sliding_spec(10, 1000, 100), fixed_spec(120, 60'000), sliding_spec(240, 3'600'000, 60'000)});

    // 10 a second for 12 seconds: 120 in minute 0.
    for (usec s = 0; s < 12; ++s)
        for (int i = 0; i < 10; ++i) REQUIRE(run(k, T0 + s * SEC, 1).allowed);

    SUBCASE("the second and the minute deny together: retry is the larger") {
        const usec now = T0 + 11 * SEC + 50 * MS;
        auto d = expect_denied(k, now, 1, 48'950 * MS);  // the minute: T0 + 60 s
        REQUIRE(d.tiers.size() == 3);
        CHECK_FALSE(d.tiers[0].admitted);
        CHECK(d.tiers[0].remaining == 0);
        CHECK(d.tiers[0].reset == 950 * MS);
        CHECK_FALSE(d.tiers[1].admitted);
        CHECK(d.tiers[1].remaining == 0);
        CHECK(d.tiers[1].reset == 48'950 * MS);
        CHECK(d.tiers[2].admitted);
        CHECK(d.tiers[2].remaining == 119);
        // Equal remaining: the longer reset is the tighter.
        REQUIRE(d.tightest() != nullptr);
        CHECK(d.tightest() == &d.tiers[1]);
        CHECK(d.tightest()->t == &k.tiers[1]);
    }

    SUBCASE("only the minute denies; the others are not charged") {
        const usec now = T0 + 12 * SEC;
        const auto before = k.state;
        auto d = expect_denied(k, now, 1, 48 * SEC);
        CHECK(d.tiers[0].admitted);
        CHECK(d.tiers[0].remaining == 9);
        CHECK_FALSE(d.tiers[1].admitted);
        CHECK(d.tiers[2].admitted);
        CHECK(d.tiers[2].remaining == 119);
        CHECK(d.tightest() == &d.tiers[1]);
        // No partial commit: the 1 s and the 1 h tiers still hold exactly what they held.
        CHECK(state_of(k, 0).data == before.tiers[0].data);
        CHECK(state_of(k, 2).data == std::vector<std::int64_t>{T0 / MIN, 120});
        CHECK(k.state.last_time == T0 + 11 * SEC);
        CHECK(k.state.expires == before.expires);
    }

    SUBCASE("the hour denies in minute 2; retry when minute 0 leaves the hour") {
        for (usec s = 60; s < 72; ++s)
            for (int i = 0; i < 10; ++i) REQUIRE(run(k, T0 + s * SEC, 1).allowed);
        const usec now = T0 + 120 * SEC;
        auto d = expect_denied(k, now, 1, HOUR - 120 * SEC);
        CHECK(d.tiers[0].admitted);
        CHECK(d.tiers[1].admitted);
        CHECK(d.tiers[1].remaining == 119);
        CHECK_FALSE(d.tiers[2].admitted);
        CHECK(d.tiers[2].remaining == 0);
        CHECK(d.tiers[2].reset == HOUR - 120 * SEC);
        CHECK(d.tightest() == &d.tiers[2]);
        CHECK(state_of(k, 2).data == std::vector<std::int64_t>{T0 / MIN, 120, T0 / MIN + 1, 120});
    }
}

TEST_CASE("several keys: a denial by one key leaves every key's state unchanged") {
    key ip({sliding_spec(10, 1000, 100)});
    key ip2({sliding_spec(10, 1000, 100)});
    key user({as_user(fixed_spec(3, 1000))});

    // Another address of the same user spends the user's quota.
    for (int i = 0; i < 3; ++i) REQUIRE(run({&ip2, &user}, T0 + 100 * MS, 1).allowed);
    REQUIRE(run(ip, T0 + 150 * MS, 1).allowed);

    SUBCASE("the user key denies") {
        const std::string ip_before = dump(ip.state), user_before = dump(user.state);
        auto d = run({&ip, &user}, T0 + 200 * MS, 1);
        CHECK_FALSE(d.allowed);
        CHECK(d.retry_after == 800 * MS);
        REQUIRE(d.tiers.size() == 2);
        CHECK(d.tiers[0].key_index == 0);
        CHECK(d.tiers[0].t == &ip.tiers[0]);
        CHECK(d.tiers[0].admitted);
        CHECK(d.tiers[0].remaining == 8);
        CHECK(d.tiers[1].key_index == 1);
        CHECK_FALSE(d.tiers[1].admitted);
        CHECK(d.tiers[1].remaining == 0);
        CHECK(d.tightest() == &d.tiers[1]);
        CHECK(dump(ip.state) == ip_before);
        CHECK(dump(user.state) == user_before);
        CHECK(retry_problem({&ip, &user}, T0 + 200 * MS, 1, d.retry_after) == "");

        // The order of the keys does not matter.
        auto r = run({&user, &ip}, T0 + 200 * MS, 1);
        CHECK_FALSE(r.allowed);
        CHECK(r.retry_after == 800 * MS);
        CHECK(r.tiers[0].key_index == 0);
        CHECK(r.tiers[0].t == &user.tiers[0]);
        CHECK(dump(ip.state) == ip_before);

        // The ip alone is still admitted, and both once the user's second is over.
        CHECK(admits_on_copy(ip, T0 + 200 * MS));
        auto ok = run({&ip, &user}, T0 + SEC, 1);
        CHECK(ok.allowed);
        CHECK(ok.tiers[0].remaining == 8);
        CHECK(ok.tiers[1].remaining == 2);
        CHECK(ip.state.last_time == T0 + SEC);
        CHECK(user.state.last_time == T0 + SEC);
    }

    SUBCASE("the ip key denies") {
        key fresh_user({as_user(fixed_spec(3, 1000))});
        for (int i = 0; i < 9; ++i) REQUIRE(run(ip, T0 + 150 * MS, 1).allowed);
        const std::string user_before = dump(fresh_user.state);
        auto d = run({&ip, &fresh_user}, T0 + 200 * MS, 1);
        CHECK_FALSE(d.allowed);
        CHECK(d.retry_after == 900 * MS);  // b1 (T0 + 100 ms) leaves at T0 + 1.1 s
        CHECK(d.tiers[1].admitted);
        CHECK(d.tiers[1].remaining == 2);
        CHECK(dump(fresh_user.state) == user_before);
        CHECK(fresh_user.state.tiers.empty());
        CHECK(fresh_user.state.last_time == no_time);
    }
}

// ---------------------------------------------------------------------------------------
// 4. Check then commit

TEST_CASE("check then commit: hammering at 10x the limit still admits exactly the limit") {
    // 10 per second, a request every 10 ms for 5 s.
    struct expectation {
        tier_spec spec;
        usec start;
    };
    const expectation cases[] = {
        {fixed_spec(10, 1000), T0 + 3 * MS},
        {sliding_spec(10, 1000, 100), T0},
        {log_spec(10, 1000), T0 + 5},
    };
    for (const auto& c : cases) {
        CAPTURE(sluice::config::to_string(c.spec.algo));
        key k({c.spec});
        std::vector<usec> admitted;
        for (int i = 0; i < 500; ++i) {
            const usec t = c.start + i * 10 * MS;
            if (run(k, t, 1).allowed) admitted.push_back(t);
        }
        // Rejected requests count nothing: the first 10 of every second get through.
        REQUIRE(admitted.size() == 50);
        for (std::size_t i = 0; i < admitted.size(); ++i) {
            CAPTURE(i);
            CHECK(admitted[i] == c.start + static_cast<usec>(i / 10) * SEC + static_cast<usec>(i % 10) * 10 * MS);
        }
    }
    {
        // gcra, burst 1: one every T = 100 ms exactly.
        key k({gcra_spec(10, 1000, 1)});
        std::vector<usec> admitted;
        for (int i = 0; i < 500; ++i) {
            const usec t = T0 + i * 10 * MS;
            if (run(k, t, 1).allowed) admitted.push_back(t);
        }
        REQUIRE(admitted.size() == 50);
        for (std::size_t i = 0; i < admitted.size(); ++i) CHECK(admitted[i] == T0 + static_cast<usec>(i) * 100 * MS);
    }
    {
        // Hammering with jitter (about 100 a second) against the sliding window: every window
        // holds at most 10, and denials cost nothing: at least 10 per elapsed second get through.
        key k({sliding_spec(10, 1000, 100)});
        std::mt19937_64 rng(12345);
        std::vector<usec> admitted;
        usec t = T0;
        for (int i = 0; i < 2000; ++i) {
            t += static_cast<usec>(rng() % (20 * MS));
            if (run(k, t, 1).allowed) admitted.push_back(t);
        }
        std::map<std::int64_t, int> per_bucket;
        for (usec a : admitted) ++per_bucket[a / (100 * MS)];
        const std::int64_t first = T0 / (100 * MS), last = t / (100 * MS);
        for (std::int64_t b = first; b <= last; ++b) {
            int window = 0;
            for (std::int64_t i = b - 9; i <= b; ++i) window += per_bucket.count(i) ? per_bucket[i] : 0;
            CAPTURE(b - first);
            CHECK(window <= 10);
        }
        CHECK(admitted.size() >= static_cast<std::size_t>((t - T0) / SEC * 10));
    }
}

// ---------------------------------------------------------------------------------------
// 5. retry_after: min_interval, combined tiers, the clock

TEST_CASE("min_interval: at least that long between two admissions - retry exact") {
    SUBCASE("quota left but too soon") {
        key k({fixed_spec(100, 1000, 200)});
        const usec t0 = T0 + 10 * MS;
        expect_allowed(k, t0);
        auto d = expect_denied(k, t0 + 150 * MS, 1, 50 * MS);
        CHECK_FALSE(d.tiers[0].admitted);
        CHECK(d.tiers[0].remaining == 99);  // the quota as it stands
        CHECK(d.tiers[0].reset == SEC - 160 * MS);
        expect_denied(k, t0 + 200 * MS - 1, 1, 1);
        expect_allowed(k, t0 + 200 * MS);  // exactly min_interval later
        CHECK(state_of(k, 0).last == t0 + 200 * MS);
        expect_denied(k, t0 + 200 * MS, 1, 200 * MS);  // the same instant: too soon
    }
    SUBCASE("min_interval and the log both deny: the later instant") {
        key k({log_spec(2, 1000, 300)});
        const usec t0 = T0;
        expect_allowed(k, t0);
        expect_allowed(k, t0 + 300 * MS);
        expect_denied(k, t0 + 350 * MS, 1, 650 * MS);  // log: t0 + 1 s; interval: t0 + 600 ms
        expect_denied(k, t0 + 600 * MS, 1, 400 * MS);  // interval met, the log still full
    }
    SUBCASE("gcra: the interval dominates") {
        key k({gcra_spec(10, 1000, 5, 250)});
        expect_allowed(k, T0);
        expect_denied(k, T0 + 10 * MS, 1, 240 * MS);
        expect_allowed(k, T0 + 250 * MS);
    }
    SUBCASE("sliding with a whole-millisecond interval") {
        key k({sliding_spec(10, 1000, 100, 7)});
        expect_allowed(k, T0 + 5);
        expect_denied(k, T0 + 5, 1, 7 * MS);
        expect_denied(k, T0 + 5 + 3 * MS, 1, 4 * MS);
        expect_allowed(k, T0 + 5 + 7 * MS);
    }
    SUBCASE("two tiers: one's interval, the other's quota; retry is the max") {
        key k({fixed_spec(100, 1000, 100), sliding_spec(2, 1000, 100)});
        expect_allowed(k, T0);
        expect_allowed(k, T0 + 100 * MS);
        auto d = expect_denied(k, T0 + 150 * MS, 1, 850 * MS);
        CHECK_FALSE(d.tiers[0].admitted);
        CHECK_FALSE(d.tiers[1].admitted);
        CHECK(d.tiers[0].remaining == 98);
        CHECK(d.tiers[1].remaining == 0);
        CHECK(d.tightest() == &d.tiers[1]);
    }
}

// Retry-After is what a client waits: for every algorithm, with and without min_interval,
// the same request sent Retry-After whole seconds after a refusal passes, and Retry-After is
// retry_after rounded up, not the quota's reset (issue 21: a min_interval refusal said 57 s
// where 1.5 s was enough).
TEST_CASE("Retry-After of every algorithm, with and without min_interval: the request passes then") {
    const std::vector<std::pair<const char*, std::vector<tier_spec>>> cases = {
        {"fixed", {fixed_spec(100, 60'000)}},
        {"fixed, min_interval", {fixed_spec(100, 60'000, 1500)}},
        {"sliding", {sliding_spec(5, 10'000, 1000)}},
        {"sliding, min_interval", {sliding_spec(100, 60'000, 1000, 1500)}},
        {"gcra", {gcra_spec(2, 3000, 1)}},
        {"gcra, min_interval", {gcra_spec(100, 60'000, 10, 1500)}},
        {"log", {log_spec(3, 5000)}},
        {"log, min_interval", {log_spec(100, 60'000, 1500)}},
    };
    std::mt19937_64 rng(21);
    for (const auto& [name, specs] : cases) {
        CAPTURE(name);
        key k(specs);
        usec now = T0 + 123'456;
        int refusals = 0;
        for (int i = 0; i < 400; ++i) {
            now += static_cast<usec>(rng() % (700 * MS));
            auto d = run(k, now, 1);
            if (d.allowed) continue;
            ++refusals;
            const std::int64_t s = retry_after_seconds(d);
            CHECK(s == std::max<std::int64_t>(1, ceil_s(d.retry_after)));
            CHECK(admits_on_copy(k, now + s * SEC));
            CHECK(retry_problem(k, now, 1, d.retry_after) == "");
            // A refusal by min_interval alone waits at most min_interval, however far the reset.
            if (d.tiers[0].remaining > 0 && specs[0].min_interval_ms > 0)
                CHECK(s <= ceil_s(specs[0].min_interval_ms * MS));
        }
        CHECK(refusals > 10);
    }
}

TEST_CASE("retry_after is the max over the denying tiers of all keys and exact") {
    key ip({gcra_spec(10, 1000, 2), log_spec(3, 2000)});
    key user({as_user(sliding_spec(5, 1000, 250, 50))});
    const std::vector<key*> both{&ip, &user};
    REQUIRE(run(both, T0 + 10 * MS, 2).allowed);
    REQUIRE(run(both, T0 + 300 * MS, 1).allowed);
    // gcra: tat = T0 + 400 ms, +T - 2T => T0 + 300 ms: admits; log: 3 live, first leaves at
    // T0 + 2.01 s (cost 1) => denies; user: 3 of 5, interval until T0 + 350 ms.
    auto d = run(both, T0 + 320 * MS, 1);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after == 2010 * MS - 320 * MS);
    CHECK(retry_problem(both, T0 + 320 * MS, 1, d.retry_after) == "");
    REQUIRE(d.tiers.size() == 3);
    CHECK(d.tiers[0].admitted);
    CHECK_FALSE(d.tiers[1].admitted);
    CHECK_FALSE(d.tiers[2].admitted);
    CHECK(d.tiers[2].key_index == 1);
    // cost 2 against gcra: T0 + 400 ms + 2T - 2T = T0 + 400 ms; log: 2nd oldest (T0 + 10 ms)
    // + 2 s: the log still decides.
    d = run(both, T0 + 320 * MS, 2);
    CHECK(d.retry_after == 2010 * MS - 320 * MS);
    CHECK(retry_problem(both, T0 + 320 * MS, 2, d.retry_after) == "");
    // The user alone: the interval.
    d = run(user, T0 + 320 * MS, 1);
    CHECK(d.retry_after == 30 * MS);
    CHECK(retry_problem(user, T0 + 320 * MS, 1, d.retry_after) == "");
}

TEST_CASE("the clock never goes back per key") {
    SUBCASE("an earlier now is clamped: no write into an older bucket") {
        key k({fixed_spec(2, 1000)});
        expect_allowed(k, T0 + SEC);
        auto d = run(k, T0 + 500 * MS, 1);  // a gateway whose clock is behind
        CHECK(d.allowed);
        CHECK(d.tiers[0].remaining == 0);
        CHECK(k.state.last_time == T0 + SEC);
        CHECK(state_of(k, 0).data == std::vector<std::int64_t>{T0 / SEC + 1, 2});
        CHECK_FALSE(admits_on_copy(k, T0 + 1500 * MS));
    }
    SUBCASE("retry_after counts from the caller's now") {
        key k({fixed_spec(1, 1000)});
        expect_allowed(k, T0 + SEC);
        // At T0 + 999 ms bucket 0 would be empty, but the key's time is T0 + 1 s: denied
        // until T0 + 2 s, which is 1001 ms after this caller's now.
        auto d = run(k, T0 + 999 * MS, 1);
        CHECK_FALSE(d.allowed);
        CHECK(d.retry_after == 1001 * MS);
        CHECK(retry_problem(k, T0 + 999 * MS, 1, d.retry_after) == "");
    }
    SUBCASE("two keys with different last times") {
        key a({fixed_spec(1, 1000)});
        key b({log_spec(1, 1000)});
        REQUIRE(run(a, T0 + 10 * SEC, 1).allowed);  // a: full until T0 + 11 s
        REQUIRE(run(b, T0 + 5 * SEC, 1).allowed);   // b: full until T0 + 6 s
        const usec now = T0 + 5500 * MS;
        auto d = run({&a, &b}, now, 1);
        CHECK_FALSE(d.allowed);
        CHECK(d.retry_after == T0 + 11 * SEC - now);
        CHECK(retry_problem({&a, &b}, now, 1, d.retry_after) == "");
    }
}

// ---------------------------------------------------------------------------------------
// 6. tightest(), remaining, reset, expires

TEST_CASE("decision::tightest and the per-tier remaining/reset") {
    SUBCASE("no tiers") {
        key k;
        auto d = run(k, T0, 1);
        CHECK(d.allowed);
        CHECK(d.tiers.empty());
        CHECK(d.tightest() == nullptr);
    }
    SUBCASE("least remaining wins over a longer reset") {
        key k({fixed_spec(3, 1000), log_spec(5, 10'000)});
        auto d = expect_allowed(k, T0 + 900 * MS);
        CHECK(d.tiers[0].remaining == 2);
        CHECK(d.tiers[0].reset == 100 * MS);
        CHECK(d.tiers[1].remaining == 4);
        CHECK(d.tiers[1].reset == 10 * SEC);
        CHECK(d.tightest() == &d.tiers[0]);
    }
    SUBCASE("equal remaining: the longer reset") {
        key k({fixed_spec(5, 1000), log_spec(5, 10'000), gcra_spec(5, 1000, 5)});
        auto d = expect_allowed(k, T0 + 900 * MS);
        CHECK(d.tiers[0].remaining == 4);
        CHECK(d.tiers[1].remaining == 4);
        CHECK(d.tiers[2].remaining == 4);
        CHECK(d.tiers[2].reset == 200 * MS);  // T = 200 ms
        CHECK(d.tightest() == &d.tiers[1]);
    }
    SUBCASE("gcra remaining and reset with a partial unit") {
        key k({gcra_spec(10, 1000, 4)});  // T = 100 ms, tolerance 400 ms
        expect_allowed(k, T0, 3);         // tat = T0 + 300 ms
        auto d = run(k, T0 + 50 * MS, 1);
        CHECK(d.allowed);  // debt 250 ms + 100 ms <= 400 ms
        // debt now 350 ms: floor((400 - 350) / 100) = 0 left; one comes back after 50 ms.
        CHECK(d.tiers[0].remaining == 0);
        CHECK(d.tiers[0].reset == 50 * MS);
        CHECK(state_of(k, 0).data == std::vector<std::int64_t>{T0 + 400 * MS});
    }
}

TEST_CASE("expires: the longest horizon of the committed tiers - a denial leaves it") {
    key k({sliding_spec(10, 1000, 100), gcra_spec(10, 1000, 20), fixed_spec(100, 1000, 5000)});
    expect_allowed(k, T0 + 7);
    CHECK(k.state.expires == T0 + 7 + 5 * SEC);  // min_interval 5 s > tolerance 2 s > per 1 s
    CHECK(k.state.last_time == T0 + 7);
    auto d = run(k, T0 + 8, 1);
    CHECK_FALSE(d.allowed);
    CHECK(k.state.expires == T0 + 7 + 5 * SEC);
    // At expires, the state is as good as none.
    key fresh({sliding_spec(10, 1000, 100), gcra_spec(10, 1000, 20), fixed_spec(100, 1000, 5000)});
    key copy = k;
    auto a = run(copy, k.state.expires, 10);
    auto b = run(fresh, k.state.expires, 10);
    CHECK(a.allowed == b.allowed);
    for (std::size_t i = 0; i < a.tiers.size(); ++i) {
        CHECK(a.tiers[i].remaining == b.tiers[i].remaining);
        CHECK(a.tiers[i].reset == b.tiers[i].reset);
    }
}

// ---------------------------------------------------------------------------------------
// 7. Randomized property tests against a brute-force reference model

namespace {

// One tier's definition, evaluated directly over the admitted history; written from
// docs/algorithms.md, independently of decide.cpp (gcra as the equivalent leaky bucket).
struct ref_tier {
    algorithm algo;
    std::int64_t limit;
    usec per, mi;
    usec bucket = 0;     // fixed: per; sliding: precision
    std::int64_t n = 1;  // sliding: per / precision
    usec T = 0;          // gcra: ceil(per / limit)
    std::int64_t burst = 0;
    std::vector<std::pair<usec, std::int64_t>> hist;  // admitted (instant, cost), in order
    usec debt = 0, debt_time = no_time;               // gcra: µs of debt at debt_time, draining 1 per µs
    usec last = no_time;                              // the last admission

    explicit ref_tier(const tier_spec& s)
        : algo(s.algo), limit(s.limit), per(s.per_ms * MS), mi(s.min_interval_ms * MS) {
        if (algo == algorithm::fixed) bucket = per;
        if (algo == algorithm::sliding) {
            bucket = s.param * MS;
            n = per / bucket;
        }
        if (algo == algorithm::gcra) {
            burst = s.param;
            T = (per + limit - 1) / limit;
        }
    }

    // Whether an entry admitted at ts counts at t (ts <= t).
    bool counts(usec ts, usec t) const {
        switch (algo) {
            case algorithm::fixed: return fdiv(ts, per) == fdiv(t, per);
            case algorithm::sliding: return fdiv(ts, bucket) >= fdiv(t, bucket) - n + 1;
            case algorithm::log: return t < ts + per;
            case algorithm::gcra:
            case algorithm::concurrency: break;
        }
        return false;
    }
    // The first instant an entry admitted at ts no longer counts.
    usec leaves(usec ts) const {
        switch (algo) {
            case algorithm::fixed: return (fdiv(ts, per) + 1) * per;
            case algorithm::sliding: return (fdiv(ts, bucket) + n) * bucket;
            default: return ts + per;
        }
    }
    std::int64_t count_at(usec t, usec* oldest = nullptr) const {
        std::int64_t c = 0;
        for (auto it = hist.rbegin(); it != hist.rend() && counts(it->first, t); ++it) {
            c += it->second;
            if (oldest) *oldest = it->first;
        }
        return c;
    }
    usec gcra_debt(usec t) const { return debt_time == no_time ? 0 : std::max<usec>(0, debt - (t - debt_time)); }

    bool quota_admits(usec t, std::int64_t cost) const {
        if (algo == algorithm::gcra) return gcra_debt(t) + cost * T <= burst * T;
        return count_at(t) + cost <= limit;
    }
    bool interval_ok(usec t) const { return mi == 0 || last == no_time || t - last >= mi; }
    bool admits(usec t, std::int64_t cost) const { return quota_admits(t, cost) && interval_ok(t); }

    void commit(usec t, std::int64_t cost) {
        if (algo == algorithm::gcra) {
            debt = gcra_debt(t) + cost * T;
            debt_time = t;
        }
        hist.emplace_back(t, cost);
        last = t;
    }

    // What decide reports for this tier; ok: this tier alone admits the request.
    std::int64_t remaining(usec t, std::int64_t cost, bool ok) const {
        if (algo == algorithm::gcra) return (burst * T - gcra_debt(t) - (ok ? cost * T : 0)) / T;
        return limit - count_at(t) - (ok ? cost : 0);
    }
    usec reset(usec t, std::int64_t cost, bool ok) const {
        if (algo == algorithm::gcra) {
            const usec x = gcra_debt(t) + (ok ? cost * T : 0);
            if (x <= 0) return 0;
            const std::int64_t rem = (burst * T - x) / T;
            return x - (burst * T - (rem + 1) * T);  // until the debt allows one more unit
        }
        usec oldest = no_time;
        count_at(t, &oldest);
        if (oldest != no_time) return leaves(oldest) - t;
        return ok && cost > 0 ? leaves(t) - t : 0;
    }
};

struct ref_key {
    std::vector<ref_tier> tiers;
    usec last_time = no_time;
};

std::uint64_t seed_or_env(std::uint64_t fallback) {
    if (const char* e = std::getenv("SLUICE_DECIDE_SEED")) return std::strtoull(e, nullptr, 0);
    return fallback;
}

// Checks the guarantee docs/algorithms.md states for one tier over the admitted history of its key.
void check_guarantee(const tier_spec& s, const std::vector<std::pair<usec, std::int64_t>>& h) {
    CAPTURE(sluice::config::to_string(s.algo));
    const usec per = s.per_ms * MS, mi = s.min_interval_ms * MS;
    std::vector<std::int64_t> prefix(h.size() + 1, 0);
    for (std::size_t i = 0; i < h.size(); ++i) prefix[i + 1] = prefix[i] + h[i].second;
    // Largest admitted cost over the spans [h[i], h[i] + len) (closed: len + 1).
    auto max_in_spans = [&](usec len) {
        std::int64_t worst = 0;
        std::size_t j = 0;
        for (std::size_t i = 0; i < h.size(); ++i) {
            j = std::max(j, i);
            while (j < h.size() && h[j].first < h[i].first + len) ++j;
            worst = std::max(worst, prefix[j] - prefix[i]);
        }
        return worst;
    };
    switch (s.algo) {
        case algorithm::fixed: {
            std::map<std::int64_t, std::int64_t> per_bucket;
            for (const auto& [t, c] : h) per_bucket[fdiv(t, per)] += c;
            for (const auto& [b, c] : per_bucket) {
                CAPTURE(b);
                REQUIRE(c <= s.limit);
            }
            break;
        }
        case algorithm::sliding:
            // At most limit in any (closed) span of per - precision.
            REQUIRE(max_in_spans(per - s.param * MS + 1) <= s.limit);
            break;
        case algorithm::log:
            // At most limit in any half-open span [t, t + per).
            REQUIRE(max_in_spans(per) <= s.limit);
            break;
        case algorithm::concurrency: break;  // not a window (its own test case)
        case algorithm::gcra: {
            // For every i <= j: cost(i..j) * T <= (t_j - t_i) + burst * T, i.e.
            // prefix[j+1]*T - t_j - burst*T <= min over i <= j of (prefix[i]*T - t_i).
            const usec T = (per + s.limit - 1) / s.limit;
            usec best = std::numeric_limits<usec>::max();
            for (std::size_t j = 0; j < h.size(); ++j) {
                best = std::min(best, prefix[j] * T - h[j].first);
                CAPTURE(j);
                REQUIRE(prefix[j + 1] * T - h[j].first - s.param * T <= best);
            }
            break;
        }
    }
    if (mi > 0)
        for (std::size_t i = 1; i < h.size(); ++i) {
            CAPTURE(i);
            REQUIRE(h[i].first - h[i - 1].first >= mi);
        }
}

// Drives decide() with `steps` random requests over keys with the given tiers (key 0 alone
// with probability key0_only, else all keys), comparing every answer with the reference.
void run_property(const std::vector<std::vector<tier_spec>>& key_specs, std::uint64_t seed, int steps,
                  double key0_only = 0.0) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    auto uni = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };

    std::vector<key> keys;
    std::vector<ref_key> refs;
    std::vector<std::vector<std::pair<usec, std::int64_t>>> admitted(key_specs.size());
    std::int64_t max_cost = std::numeric_limits<std::int64_t>::max();
    usec min_per = std::numeric_limits<usec>::max(), max_per = 0, horizon = 0;
    std::vector<usec> edges;
    for (const auto& specs : key_specs) {
        keys.emplace_back(specs);
        refs.emplace_back();
        for (const auto& s : specs) {
            const ref_tier r(s);
            refs.back().tiers.push_back(r);
            max_cost = std::min(max_cost, s.algo == algorithm::gcra ? std::min(s.limit, s.param) : s.limit);
            min_per = std::min(min_per, r.per);
            max_per = std::max(max_per, r.per);
            horizon = std::max(horizon, r.per + r.burst * r.T + r.mi);
            edges.push_back(r.algo == algorithm::gcra ? r.T : r.algo == algorithm::log ? r.per : r.bucket);
            if (r.mi > 0) edges.push_back(r.mi);
        }
    }
    // keys must not move from here on: decisions point into their tiers.
    std::size_t total_tiers = 0;
    for (const auto& k : keys) total_tiers += k.tiers.size();

    usec clock = T0 + uni(0, HOUR - 1);
    usec pending = no_time;  // the instant the last denial said to retry at
    int n_admitted = 0, n_denied = 0, n_clamped = 0, n_edge_retries = 0;  // edge: a request at a retry instant

    for (int step = 0; step < steps; ++step) {
        // The next instant: a mix of tiny, bucket-sized and long gaps, exact bucket edges,
        // the instant a denial named (and 1 µs / 1 ms before), entries' expiries.
        usec next = clock;
        const auto r = uni(0, 99);
        if (r < 8) {
        } else if (r < 13) {
            next += 1;
        } else if (r < 38) {
            next += uni(0, min_per / 20);
        } else if (r < 53) {
            next += uni(0, min_per / 3);
        } else if (r < 58) {
            next += uni(0, 2 * max_per);
        } else if (r < 70) {
            const usec e = edges[static_cast<std::size_t>(uni(0, static_cast<std::int64_t>(edges.size()) - 1))];
            next = (fdiv(clock, e) + uni(1, 2)) * e + uni(-1, 1);
        } else if (r < 85) {
            if (pending != no_time) {
                const usec deltas[] = {-MS, -1, 0, 0, 0, 1};
                next = pending + deltas[uni(0, 5)];
            }
        } else {
            const auto& rk = refs[static_cast<std::size_t>(uni(0, static_cast<std::int64_t>(refs.size()) - 1))];
            const auto& rt = rk.tiers[static_cast<std::size_t>(uni(0, static_cast<std::int64_t>(rk.tiers.size()) - 1))];
            if (!rt.hist.empty()) {
                const auto back = std::min<std::int64_t>(static_cast<std::int64_t>(rt.hist.size()), 2 * rt.limit);
                const usec ts = rt.hist[rt.hist.size() - static_cast<std::size_t>(uni(1, back))].first;
                next = (rt.mi > 0 && uni(0, 1) ? rt.last + rt.mi : rt.leaves(ts)) + uni(-1, 1);
            }
        }
        clock = std::max(clock, next);
        usec now = clock;
        if (uni(0, 99) < 3) now = clock - uni(1, min_per / 2);  // a gateway whose clock is behind
        const std::int64_t cost = uni(0, 99) < 60 ? 1 : uni(1, max_cost);

        std::vector<std::size_t> involved;
        if (keys.size() > 1 && std::uniform_real_distribution<double>(0, 1)(rng) < key0_only)
            involved = {0};
        else
            for (std::size_t i = 0; i < keys.size(); ++i) involved.push_back(i);
        std::vector<key*> ptrs;
        std::vector<std::string> before;
        std::size_t n_tiers = 0;
        for (auto i : involved) {
            ptrs.push_back(&keys[i]);
            before.push_back(dump(keys[i].state));
            n_tiers += keys[i].tiers.size();
        }

        if (now == pending) ++n_edge_retries;
        CAPTURE(step);
        CAPTURE(now - T0);
        CAPTURE(cost);
        const decision d = run(ptrs, now, cost);

        REQUIRE(d.tiers.size() == n_tiers);
        bool all_ok = true;
        std::size_t ri = 0;
        for (std::size_t j = 0; j < involved.size(); ++j) {
            const auto& rk = refs[involved[j]];
            const usec eff = std::max(now, rk.last_time);
            if (eff != now) ++n_clamped;
            for (std::size_t ti = 0; ti < rk.tiers.size(); ++ti, ++ri) {
                const auto& rt = rk.tiers[ti];
                const auto& res = d.tiers[ri];
                CAPTURE(ri);
                const bool ok = rt.admits(eff, cost);
                REQUIRE(res.key_index == j);
                REQUIRE(res.t == &keys[involved[j]].tiers[ti]);
                REQUIRE(res.admitted == ok);
                REQUIRE(res.remaining == rt.remaining(eff, cost, ok));
                if (eff == now) REQUIRE(res.reset == rt.reset(eff, cost, ok));
                all_ok = all_ok && ok;
            }
        }
        REQUIRE(d.allowed == all_ok);

        if (d.allowed) {
            ++n_admitted;
            REQUIRE(d.retry_after == 0);
            for (auto i : involved) {
                auto& rk = refs[i];
                const usec eff = std::max(now, rk.last_time);
                for (auto& rt : rk.tiers) rt.commit(eff, cost);
                rk.last_time = eff;
                admitted[i].emplace_back(eff, cost);
                REQUIRE(keys[i].state.last_time == eff);
            }
        } else {
            ++n_denied;
            // A denial writes nothing.
            for (std::size_t j = 0; j < involved.size(); ++j) REQUIRE(dump(keys[involved[j]].state) == before[j]);
            // The reference retry: the earliest later instant of the caller's clock at which
            // every tier of every key admits (each key clamping to its own last time).
            auto all_admit = [&](usec t) {
                for (auto i : involved) {
                    const usec eff = std::max(t, refs[i].last_time);
                    for (const auto& rt : refs[i].tiers)
                        if (!rt.admits(eff, cost)) return false;
                }
                return true;
            };
            usec lo = now, hi = now;
            for (auto i : involved) hi = std::max(hi, refs[i].last_time);
            hi += horizon;
            REQUIRE(all_admit(hi));
            while (hi - lo > 1) {
                const usec mid = lo + (hi - lo) / 2;
                (all_admit(mid) ? hi : lo) = mid;
            }
            REQUIRE(d.retry_after == hi - now);
            // And by probing copies of the real state.
            REQUIRE(retry_problem(ptrs, now, cost, d.retry_after) == "");
            pending = now + d.retry_after;
        }

        // After `expires` a state is as good as none.
        if (step % 50 == 0) {
            for (auto& k : keys) {
                if (k.state.expires == no_time) continue;
                const usec at = std::max(k.state.expires, clock);
                key old_state = k, fresh = k;
                fresh.state = key_state{};
                const auto a = run(old_state, at, cost), b = run(fresh, at, cost);
                REQUIRE(a.allowed == b.allowed);
                REQUIRE(a.tiers.size() == b.tiers.size());
                for (std::size_t i = 0; i < a.tiers.size(); ++i) {
                    REQUIRE(a.tiers[i].remaining == b.tiers[i].remaining);
                    REQUIRE(a.tiers[i].reset == b.tiers[i].reset);
                }
            }
        }
    }

    // The guarantees hold over what was admitted.
    for (std::size_t i = 0; i < key_specs.size(); ++i) {
        CAPTURE(i);
        for (const auto& s : key_specs[i]) check_guarantee(s, admitted[i]);
    }
    // The run was not vacuous.
    INFO("admitted " << n_admitted << ", denied " << n_denied << ", clamped " << n_clamped << ", at a retry instant "
                     << n_edge_retries);
    if (std::getenv("SLUICE_DECIDE_VERBOSE"))
        MESSAGE("seed " << seed << ": admitted " << n_admitted << ", denied " << n_denied << ", clamped " << n_clamped
                        << ", at a retry instant " << n_edge_retries);
    CHECK(n_admitted >= steps / 10);
    CHECK(n_denied >= steps / 10);
    CHECK(n_clamped > 0);
    CHECK(n_edge_retries > 0);
}

constexpr int property_steps = 3000;

}  // namespace

TEST_CASE("property: fixed agrees with the reference - at most limit per aligned bucket") {
    run_property({{fixed_spec(10, 1000)}}, seed_or_env(0xF1ED0001), property_steps);
    run_property({{fixed_spec(7, 250, 40)}}, seed_or_env(0xF1ED0002), property_steps);
}

TEST_CASE("property: sliding agrees with the reference - at most limit in any span of per minus precision") {
    run_property({{sliding_spec(10, 1000, 100)}}, seed_or_env(0x511D0001), property_steps);
    run_property({{sliding_spec(6, 600, 200, 30)}}, seed_or_env(0x511D0002), property_steps);
    run_property({{sliding_spec(20, 120, 1)}}, seed_or_env(0x511D0003), property_steps);  // n = 120
}

TEST_CASE("property: gcra agrees with the reference - cost over any interval at most burst + length/T") {
    run_property({{gcra_spec(10, 1000, 4)}}, seed_or_env(0x6C7A0001), property_steps);
    run_property({{gcra_spec(3, 1000, 2, 100)}}, seed_or_env(0x6C7A0002), property_steps);  // T = 333334
    run_property({{gcra_spec(7, 1000, 1)}}, seed_or_env(0x6C7A0003), property_steps);       // T = 142858
}

TEST_CASE("property: log agrees with the reference - at most limit in any span of per") {
    run_property({{log_spec(10, 1000)}}, seed_or_env(0x1060001), property_steps);
    run_property({{log_spec(4, 300, 50)}}, seed_or_env(0x1060002), property_steps);
}

TEST_CASE("property: several tiers over two keys - retry is the max and no partial commit") {
    run_property({{sliding_spec(10, 1000, 100), gcra_spec(20, 1000, 5)},
                  {as_user(fixed_spec(15, 1000)), as_user(log_spec(8, 500, 20))}},
                 seed_or_env(0xC0B10001), property_steps, 0.3);
}

// ---------------------------------------------------------------------------------------
// concurrency

TEST_CASE("concurrency: N leases at once whatever the cost, none for a refusal, released, renewed or lapsed") {
    sluice::config::tier_config c;
    c.kind = "ip";
    c.algo = sluice::config::algorithm::concurrency;
    c.limit = 2;
    c.per = sluice::config::duration{3000};  // the lease
    const std::vector<tier> tiers{tier::from(c, "p/ip/concurrency", "ip-concurrency")};
    key_state ks;
    const key_request kr{&ks, tiers};
    const std::span<const key_request> keys(&kr, 1);
    constexpr usec t0 = 1'000'000'000, s = 1'000'000;
    auto ask = [&](usec now, std::uint64_t lease, std::int64_t cost = 1, bool count_rejected = false) {
        return decide(keys, now, cost, count_rejected, lease);
    };

    auto a = ask(t0, 11, 5);  // a cost of 5 takes one slot
    CHECK(a.allowed);
    CHECK(a.tiers[0].remaining == 1);
    CHECK(a.tiers[0].reset == 0);
    CHECK(ask(t0, 12).allowed);
    auto refused = ask(t0 + 1, 13);
    CHECK_FALSE(refused.allowed);
    CHECK(refused.retry_unknown());
    CHECK(refused.retry_after == 0);
    CHECK(refused.tiers[0].remaining == 0);
    CHECK_FALSE(ask(t0 + 1, 13, 1, true).allowed);  // counted (penalty mode), yet not in flight
    auto charge = ask(t0 + 1, 0);                   // lease 0, a charge: nothing checked or taken
    CHECK(charge.allowed);
    CHECK(charge.tiers[0].remaining == 0);

    release_lease(keys, 11);
    CHECK(ask(t0 + 2, 14).allowed);  // 12 and 14 now
    renew_lease(keys, t0 + 2 * s, 12);
    CHECK_FALSE(ask(t0 + 3 * s + 1, 15).allowed);  // 14 lapses at t0 + 3 s + 2, 12 at t0 + 5 s
    CHECK(ask(t0 + 3 * s + 2, 15).allowed);
    renew_lease(keys, t0 + 5 * s, 12);  // lapsed: not taken again
    auto later = ask(t0 + 5 * s, 16);
    CHECK(later.allowed);
    CHECK(later.tiers[0].remaining == 0);  // 15 (until t0 + 6 s + 2) and 16
    CHECK(ks.expires == t0 + 8 * s);
}
