// Quotas on calendar windows (per: month, window_offset), penalty mode (count_rejected) and
// upstream-reported costs (cost_header), through the real gateway binary on the memory
// store and on Redis.
#include "e2e.hpp"

#include "limit/decide.hpp"

#include <chrono>
#include <regex>
#include <vector>

using namespace sluice::test;

namespace {

constexpr std::int64_t sec = 1'000'000;

std::int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Seconds from now until `end` (µs of Unix time), rounded up as Retry-After is.
std::int64_t seconds_until(std::int64_t end) { return (end - now_us() + sec - 1) / sec; }

// The t= of one tier in the RateLimit field: "<name>";r=N;t=T.
std::int64_t reset_of(const response& r) {
    std::smatch m;
    const std::string field = r.header("RateLimit");
    REQUIRE(std::regex_search(field, m, std::regex(";t=(\\d+)")));
    return std::stoll(m[1]);
}

std::string quota_yaml(const std::string& store) {
    return store + R"(
policies:
  monthly:
    ip: [ {limit: 2, per: month, algorithm: fixed} ]
  daily_ny:
    ip: [ {limit: 2, per: 1d, algorithm: fixed, window_offset: -5h} ]
  penalty:
    count_rejected: true
    ip: [ {limit: 1, per: 10s, algorithm: gcra, burst: 1} ]
  plain:
    ip: [ {limit: 1, per: 10s, algorithm: gcra, burst: 1} ]
  reported:
    ip: [ {limit: 10, per: 1h, algorithm: fixed} ]
  reported_bad:
    ip: [ {limit: 3, per: 1h, algorithm: fixed} ]
  reported_two:
    ip: [ {limit: 3, per: 1h, algorithm: fixed} ]
routes:
  - { match: { path: /month }, policy: monthly }
  - { match: { path: /day }, policy: daily_ny }
  - { match: { path: /penalty }, policy: penalty }
  - { match: { path: /plain }, policy: plain }
  - { match: { path: /cost }, policy: reported, cost_header: X-Request-Cost, max_cost: 6 }
  - { match: { path: /cost-bad }, policy: reported_bad, cost_header: x-request-cost, max_cost: 3 }
  - { match: { path: /cost-two }, policy: reported_two, cost_header: X-Request-Cost, max_cost: 3 }
)";
}

void check_quotas(std::uint16_t port) {
    using sluice::limit::month_of;
    using sluice::limit::month_start;
    constexpr std::int64_t day = 86'400 * sec, five_hours = 5 * 3600 * sec;

    auto first = fetch(port, "GET", "/month");
    REQUIRE(first.status == 200);
    CHECK(first.header("RateLimit-Policy") == "\"ip-month\";q=2;w=2678400");
    const std::int64_t month_end = month_start(month_of(now_us()) + 1);
    // The reset is the calendar month's end, to the second (the clock runs between the two reads).
    CHECK(std::abs(reset_of(first) - seconds_until(month_end)) <= 1);
    CHECK(fetch(port, "GET", "/month").status == 200);
    auto over = fetch(port, "GET", "/month");
    CHECK(over.status == 429);
    CHECK(std::abs(std::stoll(over.header("Retry-After")) - seconds_until(month_end)) <= 1);

    // Days at UTC-5 end at 05:00 UTC.
    const auto t = now_us();
    const std::int64_t day_end = ((t - five_hours) / day + 1) * day + five_hours;
    REQUIRE(fetch(port, "GET", "/day").status == 200);
    CHECK(fetch(port, "GET", "/day").status == 200);
    auto day_over = fetch(port, "GET", "/day");
    CHECK(day_over.status == 429);
    CHECK(std::abs(std::stoll(day_over.header("Retry-After")) - seconds_until(day_end)) <= 1);
    CHECK(std::abs(reset_of(day_over) - seconds_until(day_end)) <= 1);

    // Penalty mode: each refusal is counted, so a client that keeps asking waits longer
    // (1 per 10 s: 20 s, then 30 s, 40 s...); without it the wait stays at 10 s. On Redis
    // the refusals are not answered from the local deny cache: each one reaches the store.
    for (const char* path : {"/penalty", "/plain"}) REQUIRE(fetch(port, "GET", path).status == 200);
    std::vector<std::int64_t> penalty, plain;
    for (int i = 0; i < 3; ++i) {
        auto p = fetch(port, "GET", "/penalty");
        auto q = fetch(port, "GET", "/plain");
        CHECK(p.status == 429);
        CHECK(q.status == 429);
        penalty.push_back(std::stoll(p.header("Retry-After")));
        plain.push_back(std::stoll(q.header("Retry-After")));
    }
    INFO("penalty " << penalty[0] << " " << penalty[1] << " " << penalty[2]);
    CHECK(penalty[0] >= 19);
    CHECK(penalty[0] <= 20);
    CHECK(penalty[1] >= penalty[0] + 9);
    CHECK(penalty[2] >= penalty[1] + 9);
    for (auto s : plain) CHECK(s <= 10);

    // The upstream reports each request's cost; what exceeds the route's cost (1) is charged
    // after the response, which is never turned into a 429; the field never reaches the client.
    auto r1 = fetch(port, "GET", "/cost?n=4");
    CHECK(r1.status == 200);
    CHECK_FALSE(r1.has_header("X-Request-Cost"));
    CHECK(r1.header("RateLimit").find(";r=9;") != std::string::npos);
    auto r2 = fetch(port, "GET", "/cost?n=1");
    CHECK(r2.header("RateLimit").find(";r=5;") != std::string::npos);  // 10 - (1 + 3) - 1
    auto r3 = fetch(port, "GET", "/cost?n=100");                       // taken as max_cost 6
    CHECK(r3.status == 200);
    CHECK(r3.header("RateLimit").find(";r=4;") != std::string::npos);
    CHECK(fetch(port, "GET", "/cost?n=1").status == 429);  // 1 + 3 + 1 + 1 + 5 = 11 counted
    // Not a plain number: nothing more is charged (each answer shows what the ones before left).
    int left = 2;
    for (const char* n : {"2.5", "abc", "-3"}) {
        auto r = fetch(port, "GET", std::string("/cost-bad?n=") + n);
        CHECK(r.status == 200);
        CHECK(r.header("RateLimit").find(";r=" + std::to_string(left--) + ";") != std::string::npos);
    }
    // Two fields: the larger counts (a second one cannot lower the charge).
    REQUIRE(fetch(port, "GET", "/cost-two?n=3&also=1").status == 200);  // 1 + 2 of 3
    CHECK(fetch(port, "GET", "/cost-two?n=1").status == 429);
}

}  // namespace

TEST_CASE("quotas: per month and window_offset reset at the calendar edge and say when, count_rejected (memory)") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {}, quota_yaml("")));
    check_quotas(gw->port);
}

TEST_CASE("quotas: the same on the Redis store") {
    redis_server redis(unused_port());
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {},
                                         quota_yaml("store:\n  type: redis\n  redis: { nodes: [\"127.0.0.1:" +
                                                    std::to_string(redis.port) + "\"], timeout: 2s }")));
    REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 200; }));
    check_quotas(gw->port);
}
