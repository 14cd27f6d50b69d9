// How a pool picks a server (upstream/balancer.hpp): smooth weighted round robin, power of
// two choices, and the consistent hash ring.
#include "upstream/balancer.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using sluice::upstream::hash_ring;
using sluice::upstream::least_request;
using sluice::upstream::none;
using sluice::upstream::round_robin;

std::string picks(round_robin& rr, std::vector<unsigned> weights, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) {
        const std::size_t s = rr.pick(weights);
        out += s == none ? '-' : static_cast<char>('a' + s);
    }
    return out;
}

// How often least_request() picks each server over `n` seeded random values.
std::vector<int> lr_counts(std::vector<unsigned> weights, std::vector<std::uint32_t> in_flight, int n) {
    std::mt19937_64 random(42);
    std::vector<int> counts(weights.size());
    for (int i = 0; i < n; ++i) {
        const std::size_t s = least_request(weights, in_flight, random());
        REQUIRE(s < weights.size());
        ++counts[s];
    }
    return counts;
}

std::vector<std::string> addresses(int n) {
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) keys.push_back("10.0.0." + std::to_string(i + 1) + ":8080");
    return keys;
}

std::vector<std::uint64_t> hashes(int n) {
    std::mt19937_64 random(7);
    std::vector<std::uint64_t> out;
    for (int i = 0; i < n; ++i) out.push_back(random());
    return out;
}

}  // namespace

TEST_CASE("balancer round robin: 5,1,1 picks a a b a c a a, every cycle") {
    round_robin rr;
    CHECK(picks(rr, {5, 1, 1}, 7) == "aabacaa");
    CHECK(picks(rr, {5, 1, 1}, 14) == "aabacaaaabacaa");
}

TEST_CASE("balancer round robin: equal weights cycle, a weight of 0 is never picked, all 0 is none") {
    round_robin rr;
    CHECK(picks(rr, {1, 1, 1}, 9) == "abcabcabc");
    round_robin skip;
    CHECK(picks(skip, {2, 0, 1}, 6) == "acaaca");
    round_robin idle;
    CHECK(picks(idle, {0, 0}, 3) == "---");
    CHECK(picks(idle, {}, 1) == "-");
    // A server out of rotation keeps its score; the others go on without it.
    round_robin out;
    CHECK(picks(out, {1, 1, 1}, 1) == "a");
    CHECK(picks(out, {0, 1, 1}, 4) == "bcbc");
    CHECK(picks(out, {1, 1, 1}, 6).find('a') != std::string::npos);
}

TEST_CASE("balancer round robin: exact shares over 10,000 picks of 3,2,1") {
    round_robin rr;
    std::array<int, 3> counts{};
    const std::vector<unsigned> weights{3, 2, 1};
    for (int i = 0; i < 9996; ++i) ++counts[rr.pick(weights)];  // 1666 whole cycles of 6
    CHECK(counts == std::array<int, 3>{4998, 3332, 1666});
    for (int i = 0; i < 4; ++i) ++counts[rr.pick(weights)];  // a cycle is a b a c b a
    CHECK(counts == std::array<int, 3>{5000, 3333, 1667});
}

TEST_CASE("balancer round robin: servers added start at 0, servers removed are forgotten") {
    round_robin rr;
    CHECK(picks(rr, {1, 1}, 1) == "a");  // scores -1, 1
    // The new server's score starts at 0: 0 2 1 -> b, 1 0 2 -> c, 2 1 0 -> a.
    CHECK(picks(rr, {1, 1, 1}, 3) == "bca");
    CHECK(picks(rr, {1}, 3) == "aaa");
    CHECK(picks(rr, {}, 1) == "-");
    // Everything forgotten: as a new balancer.
    CHECK(picks(rr, {5, 1, 1}, 7) == "aabacaa");
}

TEST_CASE("balancer least_request: the less loaded of two, one candidate, none") {
    const std::vector<unsigned> two{1, 1};
    const std::vector<std::uint32_t> loads{5, 2};
    for (std::uint64_t r : {0ULL, ~0ULL, 0x00000000ffffffffULL, 0xffffffff00000000ULL, 0x9e3779b97f4a7c15ULL})
        CHECK(least_request(two, loads, r) == 1);

    const std::vector<unsigned> one{0, 3, 0};
    const std::vector<std::uint32_t> busy{0, 1000, 0};
    for (std::uint64_t r : {0ULL, ~0ULL, 12345ULL}) CHECK(least_request(one, busy, r) == 1);

    CHECK(least_request(std::vector<unsigned>{0, 0}, std::vector<std::uint32_t>{0, 0}, 1) == none);
    CHECK(least_request({}, {}, 1) == none);
}

TEST_CASE("balancer least_request: two distinct draws, uniform over the candidates") {
    // 0, 100, 100: server 0 wins whenever it is drawn, in 2 of the 3 pairs.
    auto c = lr_counts({1, 1, 1}, {0, 100, 100}, 30000);
    MESSAGE("0,100,100: ", c[0], " ", c[1], " ", c[2]);
    CHECK(c[0] > 19000);  // 2/3: 20,000
    CHECK(c[0] < 21000);
    CHECK(c[1] > 4500);  // 1/6 each (the first drawn of the tied pair): 5,000
    CHECK(c[2] > 4500);

    // The most loaded is never picked: the other draw is always another server.
    c = lr_counts({1, 1, 1, 1, 1}, {50, 40, 30, 20, 10}, 10000);
    CHECK(c[0] == 0);
    CHECK(c[4] > 0);
    CHECK(c[4] < 10000);  // not the least loaded of all: two choices, not a scan

    // All tied: the first drawn, uniform over the candidates.
    c = lr_counts({1, 1, 1, 1}, {0, 0, 0, 0}, 40000);
    for (int n : c) CHECK((n > 9400 && n < 10600));
}

TEST_CASE("balancer least_request: weight 0 is never a candidate, and load is per unit of weight") {
    auto c = lr_counts({1, 0, 1, 0}, {10, 0, 10, 0}, 10000);
    CHECK(c[1] == 0);
    CHECK(c[3] == 0);
    CHECK(c[0] > 4500);
    CHECK(c[2] > 4500);

    // 2 in flight over weight 2 ties with 1 over weight 1: the first drawn, either.
    c = lr_counts({2, 1}, {2, 1}, 10000);
    CHECK(c[0] > 4500);
    CHECK(c[1] > 4500);
    CHECK(lr_counts({2, 1}, {1, 1}, 1000)[0] == 1000);  // 0.5 against 1
    CHECK(lr_counts({2, 1}, {3, 1}, 1000)[1] == 1000);  // 1.5 against 1
    // Products past 32 bits: 4e9 / 1000 = 4e6 against 4,000,001 / 1, and against 4,000,001 / 2
    // (8e9 against 4,000,001,000: in 32 bits the first would wrap to the smaller).
    CHECK(lr_counts({1000, 1}, {4'000'000'000u, 4'000'001u}, 1000)[0] == 1000);
    CHECK(lr_counts({1000, 2}, {4'000'000'000u, 4'000'001u}, 1000)[1] == 1000);
}

TEST_CASE("balancer hash ring: empty, all out of rotation, a ring of one") {
    const hash_ring empty;
    CHECK(empty.pick(1, std::vector<unsigned>{}) == none);
    CHECK(empty.pick(1, std::vector<unsigned>{1}) == none);
    const auto keys = addresses(3);
    const hash_ring ring(keys, std::vector<unsigned>{1, 1, 1});
    for (std::uint64_t h : hashes(100)) CHECK(ring.pick(h, std::vector<unsigned>{0, 0, 0}) == none);
    const auto one_key = addresses(1);
    const hash_ring one(one_key, std::vector<unsigned>{1});
    for (std::uint64_t h : hashes(100)) CHECK(one.pick(h, std::vector<unsigned>{1}) == 0);
}

TEST_CASE("balancer hash ring: deterministic, and even over equal servers") {
    const auto keys = addresses(3);
    const std::vector<unsigned> weights{1, 1, 1};
    const hash_ring a(keys, weights);
    const hash_ring b(keys, weights);
    std::array<int, 3> counts{};
    for (std::uint64_t h : hashes(30000)) {
        const std::size_t s = a.pick(h, weights);
        REQUIRE(s < 3);
        CHECK(b.pick(h, weights) == s);
        CHECK(a.pick(h, weights) == s);
        ++counts[s];
    }
    MESSAGE("3 equal servers, 30,000 random hashes: ", counts[0], " ", counts[1], " ", counts[2]);
    // 10,000 each, within 20%. With 100 points a server, shares spread by about 8% (rms over many
    // key sets); these keys and hashes are fixed, so the test gives the same counts every run.
    for (int n : counts) CHECK((n > 8000 && n < 12000));

    // Structured hashes (sequential identifiers) spread as well: pick() mixes them first.
    counts = {};
    for (std::uint64_t h = 0; h < 30000; ++h) ++counts[a.pick(h, weights)];
    MESSAGE("3 equal servers, hashes 0..29,999: ", counts[0], " ", counts[1], " ", counts[2]);
    for (int n : counts) CHECK((n > 8000 && n < 12000));
}

TEST_CASE("balancer hash ring: weights 2:1 take about 2:1, and a weight of 0 at build counts as 1") {
    const auto keys = addresses(2);
    const hash_ring ring(keys, std::vector<unsigned>{2, 1});
    std::array<int, 2> counts{};
    for (std::uint64_t h : hashes(30000)) ++counts[ring.pick(h, std::vector<unsigned>{2, 1})];
    const double ratio = static_cast<double>(counts[0]) / counts[1];
    MESSAGE("weights 2:1, 30,000 hashes: ", counts[0], " ", counts[1], " (", ratio, ")");
    CHECK(ratio > 1.6);
    CHECK(ratio < 2.5);

    const hash_ring zero(keys, std::vector<unsigned>{0, 1});
    counts = {};
    for (std::uint64_t h : hashes(30000)) ++counts[zero.pick(h, std::vector<unsigned>{1, 1})];
    for (int n : counts) CHECK((n > 12000 && n < 18000));
}

TEST_CASE("balancer hash ring: removing one of 5 servers moves only its identifiers, about 1/5") {
    const auto five = addresses(5);
    std::vector<std::string> four = five;
    four.erase(four.begin() + 2);
    const hash_ring before(five, std::vector<unsigned>(5, 1));
    const hash_ring after(four, std::vector<unsigned>(4, 1));
    int moved = 0;
    int total = 0;
    for (std::uint64_t h : hashes(30000)) {
        const std::string& was = five[before.pick(h, std::vector<unsigned>(5, 1))];
        const std::string& is = four[after.pick(h, std::vector<unsigned>(4, 1))];
        if (was == five[2]) {
            CHECK(is != was);
            ++moved;
        } else {
            CHECK(is == was);  // exactly: every other identifier stays
        }
        ++total;
    }
    MESSAGE("moved by removing 1 of 5: ", moved, " of ", total);
    CHECK(moved > total / 5 * 7 / 10);  // 6,000 expected
    CHECK(moved < total / 5 * 13 / 10);
}

TEST_CASE("balancer hash ring: a server out of rotation hands its identifiers to the next servers") {
    const auto five = addresses(5);
    std::vector<std::string> four = five;
    four.erase(four.begin() + 3);
    const hash_ring ring(five, std::vector<unsigned>(5, 1));
    const hash_ring without(four, std::vector<unsigned>(4, 1));
    const std::vector<unsigned> all(5, 1);
    const std::vector<unsigned> out{1, 1, 1, 0, 1};
    std::array<int, 5> taken{};
    for (std::uint64_t h : hashes(30000)) {
        const std::size_t was = ring.pick(h, all);
        const std::size_t is = ring.pick(h, out);
        REQUIRE(is < 5);
        CHECK(is != 3);
        if (was != 3) {
            CHECK(is == was);
        } else {
            ++taken[is];
        }
        // The next point clockwise that is not server 3's: as if it were not on the ring.
        CHECK(five[is] == four[without.pick(h, std::vector<unsigned>(4, 1))]);
    }
    MESSAGE("server 3's identifiers went to: ", taken[0], " ", taken[1], " ", taken[2], " ", taken[4]);
    // Spread over the others (its points have different neighbours), not all onto one.
    for (std::size_t s : {0, 1, 2, 4}) CHECK(taken[s] > 0);
}
