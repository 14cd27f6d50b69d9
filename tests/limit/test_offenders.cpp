// Who is being limited (limit/offenders.hpp): per-worker space-saving summaries over six
// 10-second periods, merged when read.
#include "limit/offenders.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

using sluice::limit::digest;
using sluice::limit::offender;
using sluice::limit::offenders;

digest id_of(unsigned n) {
    digest d{};
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint8_t>((n * 2654435761u) >> (i % 4 * 8));
    d[15] = static_cast<std::uint8_t>(n);
    d[14] = static_cast<std::uint8_t>(n >> 8);
    return d;
}

void refuse(offenders& o, std::int64_t now, unsigned who, int times, std::size_t policy = 0) {
    for (int i = 0; i < times; ++i)
        o.refused(now, policy, "p", sluice::identity::kind::ip, id_of(who), "client-" + std::to_string(who));
}

std::vector<offender> read(const offenders& o, std::int64_t now) {
    std::vector<offender> all;
    o.collect(now, all);
    return offenders::merge(all);
}

constexpr std::int64_t T0 = 1'700'000'000;  // a multiple of 10

}  // namespace

TEST_CASE("offenders: exact counts below capacity, most first, per identity and policy") {
    offenders o;
    refuse(o, T0, 1, 5);
    refuse(o, T0 + 3, 2, 9);
    refuse(o, T0 + 12, 1, 2);     // the next period
    refuse(o, T0 + 12, 1, 4, 7);  // another policy: another entry
    auto top = offenders::top(read(o, T0 + 15), 10);
    REQUIRE(top.size() == 3);
    CHECK(top[0].label == "client-2");
    CHECK(top[0].refusals == 9);
    CHECK(top[1].label == "client-1");
    CHECK(top[1].refusals == 7);
    CHECK(top[1].policy_slot == 0);
    CHECK(top[2].refusals == 4);
    CHECK(top[2].policy_slot == 7);
    for (const auto& e : top) CHECK(e.overcount == 0);
    CHECK(offenders::top(read(o, T0 + 15), 1).size() == 1);
}

TEST_CASE("offenders: only the last minute counts, and a period is reused once it is a minute old") {
    offenders o;
    refuse(o, T0, 1, 3);
    refuse(o, T0 + 30, 2, 1);
    CHECK(read(o, T0 + 59).size() == 2);
    auto later = read(o, T0 + 60);  // T0's period is a minute old
    REQUIRE(later.size() == 1);
    CHECK(later[0].label == "client-2");
    refuse(o, T0 + 60, 3, 2);  // lands in T0's slot, which starts afresh
    later = read(o, T0 + 61);
    CHECK(later.size() == 2);
    CHECK(read(o, T0 + 200).empty());
}

TEST_CASE("offenders: merged across workers, counts summed") {
    offenders a, b;
    refuse(a, T0, 1, 2);
    refuse(b, T0 + 1, 1, 3);
    refuse(b, T0 + 1, 2, 1);
    std::vector<offender> all;
    a.collect(T0 + 2, all);
    b.collect(T0 + 2, all);
    auto top = offenders::top(all, 5);
    REQUIRE(top.size() == 2);
    CHECK(top[0].refusals == 5);
    CHECK(top[1].refusals == 1);
}

TEST_CASE("offenders: past capacity a heavy hitter is still found, its count bounded") {
    offenders o;
    const unsigned many = offenders::capacity + 300;
    for (unsigned n = 0; n < many; ++n) {
        refuse(o, T0, 1000 + n, 1);
        if (n % 3 == 0) refuse(o, T0, 7, 1);
    }
    auto held = read(o, T0 + 1);
    CHECK(held.size() == offenders::capacity);  // fixed memory
    auto top = offenders::top(held, 1);
    REQUIRE(top.size() == 1);
    CHECK(top[0].label == "client-7");
    const std::uint64_t truth = (many + 2) / 3;
    CHECK(top[0].refusals >= truth);
    CHECK(top[0].refusals - top[0].overcount <= truth);
}
