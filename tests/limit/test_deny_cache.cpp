// The deny cache: denials answered locally until their retry_after, bounded, cleared on reload.
#include "limit/deny_cache.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace sluice::limit;
using namespace std::chrono_literals;

namespace {

struct deny_fixture {
    std::vector<sluice::limit::tier> tiers;
    std::vector<sluice::limit::store_key> keys;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();

    deny_fixture() {
        tiers.resize(2);
        tiers[0].key = 11;
        tiers[0].id = "p/ip/sliding/1s/100ms";
        tiers[1].key = 22;
        tiers[1].id = "p/ip/fixed/1m/1m";
        keys.resize(1);
        keys[0].kind = sluice::identity::kind::ip;
        keys[0].id[0] = 7;
        keys[0].tiers = tiers;
    }
    sluice::limit::check_request request(std::int64_t cost = 1) { return {keys, cost}; }
    sluice::limit::decision denial(sluice::limit::usec retry_after) {
        sluice::limit::decision d;
        d.allowed = false;
        d.retry_after = retry_after;
        d.tiers.push_back({&tiers[0], 0, 0, 800'000, false});
        d.tiers.push_back({&tiers[1], 0, 5, 30'000'000, true});
        return d;
    }
};

}  // namespace

TEST_CASE("deny cache answers a denial until its retry_after, counting the time elapsed") {
    deny_fixture f;
    deny_cache c(10);
    auto r = f.request();
    CHECK_FALSE(c.find(r, f.t0));
    c.insert(r, f.denial(1'000'000), f.t0);
    CHECK(c.size() == 1);

    auto hit = c.find(r, f.t0 + 300ms);
    REQUIRE(hit);
    CHECK_FALSE(hit->allowed);
    CHECK(hit->retry_after == 700'000);
    REQUIRE(hit->tiers.size() == 2);
    CHECK(hit->tiers[0].t == &f.tiers[0]);
    CHECK(hit->tiers[0].reset == 500'000);
    CHECK(hit->tiers[1].remaining == 5);
    CHECK(hit->tiers[1].reset == 29'700'000);

    CHECK_FALSE(c.find(f.request(2), f.t0 + 300ms));  // another cost is another request
    CHECK_FALSE(c.find(r, f.t0 + 1s));                // the instant it is admitted again
    CHECK(c.size() == 0);
}

TEST_CASE("deny cache rebuilds tier pointers from the asking request") {
    deny_fixture f;
    deny_cache c(10);
    c.insert(f.request(), f.denial(1'000'000), f.t0);
    // The same identifiers and tiers, in another request's memory (a later snapshot).
    deny_fixture g;
    g.t0 = f.t0;
    auto hit = c.find(g.request(), f.t0 + 1ms);
    REQUIRE(hit);
    CHECK(hit->tiers[0].t == &g.tiers[0]);
    CHECK(hit->tiers[1].t == &g.tiers[1]);
    // Another identifier misses.
    g.keys[0].id[0] = 8;
    CHECK_FALSE(c.find(g.request(), f.t0 + 1ms));
}

TEST_CASE("deny cache ignores admissions, is bounded, evicts the oldest, and clears") {
    deny_fixture f;
    deny_cache c(3);
    auto d = f.denial(10'000'000);
    auto allowed = d;
    allowed.allowed = true;
    c.insert(f.request(1), allowed, f.t0);
    CHECK(c.size() == 0);
    for (int cost = 1; cost <= 5; ++cost) c.insert(f.request(cost), d, f.t0);
    CHECK(c.size() == 3);
    CHECK_FALSE(c.find(f.request(1), f.t0));
    CHECK_FALSE(c.find(f.request(2), f.t0));
    CHECK(c.find(f.request(5), f.t0));
    // Re-inserting the same request many times stays bounded.
    for (int i = 0; i < 100; ++i) c.insert(f.request(5), d, f.t0);
    CHECK(c.size() == 3);
    c.clear();
    CHECK(c.size() == 0);
    CHECK_FALSE(c.find(f.request(5), f.t0));
}
