// The memory store's bound on the identifiers of one kind (store_key::max_values): a per-kind
// LRU list in each stripe beside the stripe's own, its evictions counted per kind; kinds are
// told apart by their number even where their digests are equal.
#include "identity/kind.hpp"
#include "store/memory_store.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace {

namespace limit = sluice::limit;
namespace config = sluice::config;
namespace identity = sluice::identity;
using limit::usec;
using sluice::store::memory_store;

constexpr usec SEC = 1'000'000;
constexpr usec T0 = 1'699'995'600 * SEC;

limit::tier minute_tier(const std::string& kind, std::int64_t n) {
    config::tier_config c;
    c.kind = kind;
    c.limit = n;
    c.per = std::chrono::minutes(1);
    c.algo = config::algorithm::fixed;
    c.precision = c.per;
    return limit::tier::from(c, "k/" + kind + "/fixed/1m/1m", kind + "-1m");
}

// An identifier in stripe `stripe` (bytes 8 and 9), told apart by `n`.
limit::digest id_in(std::size_t stripe, std::uint32_t n) {
    limit::digest d{};
    d[0] = static_cast<std::uint8_t>(n);
    d[1] = static_cast<std::uint8_t>(n >> 8);
    d[8] = static_cast<std::uint8_t>(stripe);
    return d;
}

std::uint64_t evictions_of(const memory_store& s, identity::kind k) {
    for (const auto& [kind, n] : s.kind_evictions())
        if (kind == k) return n;
    return 0;
}

}  // namespace

TEST_CASE("memory store kinds: a kind's bound evicts its least recently used identifier of the stripe") {
    usec now = T0;
    memory_store s(100'000, [&] { return now; });
    const identity::kind tenant = identity::kind_of("header:x-mem-tenant");
    const identity::kind other = identity::kind_of("query:mem-other");
    const std::vector<limit::tier> tiers{minute_tier("header:x-mem-tenant", 2)};
    const auto check = [&](identity::kind k, limit::digest id, std::uint32_t bound) {
        const limit::store_key key{k, id, tiers, bound};
        auto r = s.try_check({std::span(&key, 1), 1});
        REQUIRE(r);
        return r->verdict;
    };
    // 128 values: 2 per stripe. Three of them in stripe 5: the first is used twice.
    CHECK(check(tenant, id_in(5, 1), 128).allowed);
    CHECK(check(tenant, id_in(5, 1), 128).allowed);
    CHECK_FALSE(check(tenant, id_in(5, 1), 128).allowed);
    CHECK(check(tenant, id_in(5, 2), 128).allowed);
    CHECK(s.keys_held() == 2);
    // Another kind in the stripe does not count against this one.
    CHECK(check(other, id_in(5, 9), 128).allowed);
    CHECK(s.keys_held() == 3);
    // A third value of the kind evicts the least recently used one (1, used before 2).
    now += SEC;
    CHECK(check(tenant, id_in(5, 2), 128).allowed);  // 2 is now the most recent
    CHECK(check(tenant, id_in(5, 3), 128).allowed);
    CHECK(s.keys_held() == 3);
    CHECK(evictions_of(s, tenant) == 1);
    CHECK(evictions_of(s, other) == 0);
    CHECK(s.evictions() == 0);  // store.memory.max_keys was not reached
    // 1 starts afresh: two more admissions.
    CHECK(check(tenant, id_in(5, 1), 128).allowed);
    CHECK(evictions_of(s, tenant) == 2);  // 2 was the least recent now
    CHECK(check(tenant, id_in(5, 1), 128).allowed);
    CHECK_FALSE(check(tenant, id_in(5, 1), 128).allowed);
    // Other stripes hold their own two.
    CHECK(check(tenant, id_in(6, 1), 128).allowed);
    CHECK(check(tenant, id_in(6, 2), 128).allowed);
    CHECK(evictions_of(s, tenant) == 2);
    // Without a bound (0) the kind is bounded by max_keys alone.
    for (std::uint32_t n = 10; n < 20; ++n) CHECK(check(other, id_in(7, n), 0).allowed);
    CHECK(evictions_of(s, other) == 0);
}

TEST_CASE("memory store kinds: a bound of N holds at most 64 * ceil(N / 64) identifiers, however many come") {
    usec now = T0;
    memory_store s(1'000'000, [&] { return now; });
    const identity::kind k = identity::kind_of("header:x-mem-flood");
    const std::vector<limit::tier> tiers{minute_tier("header:x-mem-flood", 5)};
    constexpr std::uint32_t values = 1000;
    for (std::uint32_t n = 0; n < values; ++n) {
        limit::digest id{};
        id[0] = static_cast<std::uint8_t>(n);
        id[1] = static_cast<std::uint8_t>(n >> 8);
        id[8] = static_cast<std::uint8_t>(n * 37);  // spread over the stripes
        id[9] = static_cast<std::uint8_t>(n >> 3);
        const limit::store_key key{k, id, tiers, 64};
        REQUIRE(s.try_check({std::span(&key, 1), 1})->verdict.allowed);
    }
    CHECK(s.keys_held() <= 64);
    CHECK(evictions_of(s, k) == values - s.keys_held());
}

TEST_CASE("memory store kinds: two kinds with one digest are two identifiers") {
    usec now = T0;
    memory_store s(1000, [&] { return now; });
    const identity::kind a = identity::kind_of("header:x-mem-a"), b = identity::kind_of("header:x-mem-b");
    const std::vector<limit::tier> tiers{minute_tier("t", 1)};
    const limit::store_key ka{a, id_in(3, 1), tiers, 64}, kb{b, id_in(3, 1), tiers, 64};
    CHECK(s.try_check({std::span(&ka, 1), 1})->verdict.allowed);
    CHECK(s.try_check({std::span(&kb, 1), 1})->verdict.allowed);
    CHECK_FALSE(s.try_check({std::span(&ka, 1), 1})->verdict.allowed);
    CHECK(s.keys_held() == 2);
}
