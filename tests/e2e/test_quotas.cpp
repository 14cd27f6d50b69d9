// Quotas on calendar windows (per: month, window_offset), through the real gateway binary
// on the memory store and on Redis: the reset and Retry-After name the window's real end.
#include "e2e.hpp"

#include "limit/decide.hpp"

#include <chrono>
#include <regex>

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
routes:
  - { match: { path: /month }, policy: monthly }
  - { match: { path: /day }, policy: daily_ny }
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
}

}  // namespace

TEST_CASE("quotas: per month and window_offset reset at the calendar edge, and say when (memory store)") {
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
