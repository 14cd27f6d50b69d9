// Rate-limit response fields (limit/rate_limit_fields.hpp): draft-ietf-httpapi-ratelimit-headers
// structured fields (RateLimit-Policy and RateLimit: every tier, RateLimit's tightest first), the legacy
// X-RateLimit-* trio, both, or none; and Retry-After's whole seconds.
#include "limit/rate_limit_fields.hpp"

#include <doctest/doctest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

namespace {

using sluice::limit::decision;
using sluice::limit::tier;
using sluice::limit::tier_result;
using sluice::limit::usec;
using style = sluice::config::response_config::header_style;

constexpr usec SEC = 1'000'000;

tier make_tier(std::string name, std::int64_t limit, usec per) {
    tier t;
    t.name = std::move(name);
    t.limit = limit;
    t.per = per;
    return t;
}

std::string fields_of(const decision& d, style s) {
    std::string out;
    sluice::limit::append_rate_limit_fields(out, d, s);
    return out;
}

// "Name: value\r\n" lines into a map (names unique here); fails on anything else.
std::map<std::string, std::string> lines_of(const std::string& fields) {
    std::map<std::string, std::string> out;
    std::size_t at = 0;
    while (at < fields.size()) {
        const auto end = fields.find("\r\n", at);
        REQUIRE(end != std::string::npos);
        const std::string line = fields.substr(at, end - at);
        const auto colon = line.find(": ");
        REQUIRE(colon != std::string::npos);
        CHECK(line.find('\n') == std::string::npos);
        CHECK(out.emplace(line.substr(0, colon), line.substr(colon + 2)).second);
        at = end + 2;
    }
    return out;
}

// One member of a structured-field list: an sf-string with integer parameters.
struct sf_item {
    std::string name;
    std::map<std::string, std::int64_t> params;
};

// Parses the subset of RFC 8941 lists these fields use: "name";key=int;key=int, ...
std::vector<sf_item> parse_sf_list(const std::string& value) {
    static const std::regex member(R"re(\s*"([^"\\]*)"((?:;[a-z][a-z0-9_.*-]*=-?\d+)*)\s*(,|$))re");
    static const std::regex param(R"(;([a-z][a-z0-9_.*-]*)=(-?\d+))");
    std::vector<sf_item> out;
    auto it = value.cbegin();
    std::smatch m;
    while (it != value.cend()) {
        REQUIRE_MESSAGE(std::regex_search(it, value.cend(), m, member, std::regex_constants::match_continuous),
                        "not a structured-field list: " << value);
        sf_item item{m[1], {}};
        const std::string ps = m[2];
        for (auto p = std::sregex_iterator(ps.begin(), ps.end(), param); p != std::sregex_iterator(); ++p)
            item.params[(*p)[1]] = std::stoll((*p)[2]);
        out.push_back(std::move(item));
        it = m[0].second;
        if (m[3] == "," && it == value.cend()) FAIL("trailing comma: " << value);
    }
    return out;
}

// Two tiers, the second the tighter: ip-1s (limit 10, 3 left, resets in 0.4 s) and
// ip-1h (limit 240, 1 left, resets in 1800.000001 s, rounding up to 1801).
struct two_tiers {
    tier fast = make_tier("ip-1s", 10, SEC);
    tier slow = make_tier("ip-1h", 240, 3600 * SEC);
    decision d;
    two_tiers() {
        d.tiers.push_back({&fast, 0, 3, 400'000, true});
        d.tiers.push_back({&slow, 0, 1, 1800 * SEC + 1, true});
    }
};

}  // namespace

TEST_CASE("rate-limit fields, ietf: RateLimit-Policy and RateLimit list every tier, RateLimit's tightest first") {
    two_tiers f;
    const auto fields = fields_of(f.d, style::ietf);
    const auto lines = lines_of(fields);
    CHECK(lines.size() == 2);
    REQUIRE(lines.count("RateLimit-Policy") == 1);
    REQUIRE(lines.count("RateLimit") == 1);

    const auto policy = parse_sf_list(lines.at("RateLimit-Policy"));
    REQUIRE(policy.size() == 2);
    CHECK(policy[0].name == "ip-1s");
    CHECK(policy[0].params == std::map<std::string, std::int64_t>{{"q", 10}, {"w", 1}});
    CHECK(policy[1].name == "ip-1h");
    CHECK(policy[1].params == std::map<std::string, std::int64_t>{{"q", 240}, {"w", 3600}});

    const auto limit = parse_sf_list(lines.at("RateLimit"));
    REQUIRE(limit.size() == 2);
    CHECK(limit[0].name == "ip-1h");
    CHECK(limit[0].params == std::map<std::string, std::int64_t>{{"r", 1}, {"t", 1801}});
    CHECK(limit[1].name == "ip-1s");
    CHECK(limit[1].params == std::map<std::string, std::int64_t>{{"r", 3}, {"t", 1}});

    // The serialisation RFC 8941 gives (", " between members), as docs/configuration.md shows it.
    CHECK(fields ==
          "RateLimit-Policy: \"ip-1s\";q=10;w=1, \"ip-1h\";q=240;w=3600\r\n"
          "RateLimit: \"ip-1h\";r=1;t=1801, \"ip-1s\";r=3;t=1\r\n");
}

TEST_CASE("rate-limit fields: the tightest tier is the least remaining, ties broken by the longest reset") {
    tier a = make_tier("user-1m", 100, 60 * SEC), b = make_tier("user-1h", 1000, 3600 * SEC);
    decision d;
    d.tiers.push_back({&a, 1, 5, 2 * SEC, true});
    d.tiers.push_back({&b, 1, 5, 30 * SEC, true});
    auto limit = parse_sf_list(lines_of(fields_of(d, style::ietf)).at("RateLimit"));
    REQUIRE(limit.size() == 2);
    CHECK(limit[0].name == "user-1h");
    CHECK(limit[0].params.at("t") == 30);

    d.tiers[0].remaining = 4;  // now the first is tighter despite its shorter reset
    limit = parse_sf_list(lines_of(fields_of(d, style::ietf)).at("RateLimit"));
    CHECK(limit[0].name == "user-1m");
    CHECK(limit[0].params.at("r") == 4);
    CHECK(limit[0].params.at("t") == 2);
}

TEST_CASE("rate-limit fields: rounding of w and t, and r never negative") {
    tier odd = make_tier("ip-1500ms", 7, 1'500'000);
    decision d;
    d.tiers.push_back({&odd, 0, -3, 1, false});  // denied: over by 3, resets in 1 µs
    auto lines = lines_of(fields_of(d, style::ietf));
    auto policy = parse_sf_list(lines.at("RateLimit-Policy"));
    REQUIRE(policy.size() == 1);
    // 1.5 s is no whole second: stated over 3 s, which hold two windows
    CHECK(policy[0].params == std::map<std::string, std::int64_t>{{"q", 14}, {"w", 3}});
    auto limit = parse_sf_list(lines.at("RateLimit"));
    CHECK(limit[0].params.at("r") == 0);
    CHECK(limit[0].params.at("t") == 1);  // 1 µs rounds up to a whole second

    d.tiers[0] = {&odd, 0, 7, 0, true};  // nothing used: no reset pending
    limit = parse_sf_list(lines_of(fields_of(d, style::ietf)).at("RateLimit"));
    CHECK(limit[0].params.at("r") == 7);
    CHECK(limit[0].params.at("t") == 0);

    d.tiers[0] = {&odd, 0, 2, 2 * SEC, true};  // exactly 2 s stays 2
    limit = parse_sf_list(lines_of(fields_of(d, style::ietf)).at("RateLimit"));
    CHECK(limit[0].params.at("t") == 2);
}

TEST_CASE("rate-limit fields, legacy: X-RateLimit-Limit/-Remaining/-Reset of the tightest tier") {
    two_tiers f;
    const auto lines = lines_of(fields_of(f.d, style::legacy));
    CHECK(lines.size() == 3);
    CHECK(lines.at("X-RateLimit-Limit") == "240");
    CHECK(lines.at("X-RateLimit-Remaining") == "1");
    CHECK(lines.at("X-RateLimit-Reset") == "1801");
    CHECK(lines.count("RateLimit") == 0);

    f.d.tiers[1].remaining = -1;
    CHECK(lines_of(fields_of(f.d, style::legacy)).at("X-RateLimit-Remaining") == "0");
}

TEST_CASE("rate-limit fields, both: the ietf pair and the legacy trio, agreeing") {
    two_tiers f;
    const auto both = fields_of(f.d, style::both);
    const auto lines = lines_of(both);
    CHECK(lines.size() == 5);
    CHECK(both == fields_of(f.d, style::ietf) + fields_of(f.d, style::legacy));
    const auto limit = parse_sf_list(lines.at("RateLimit"));
    CHECK(std::to_string(limit[0].params.at("r")) == lines.at("X-RateLimit-Remaining"));
    CHECK(std::to_string(limit[0].params.at("t")) == lines.at("X-RateLimit-Reset"));
}

TEST_CASE("rate-limit fields: none, or a decision without tiers, adds nothing, fields are appended") {
    two_tiers f;
    CHECK(fields_of(f.d, style::none).empty());
    decision empty;
    for (auto s : {style::ietf, style::legacy, style::both, style::none}) CHECK(fields_of(empty, s).empty());

    std::string out = "Via: 1.1 sluice\r\n";
    sluice::limit::append_rate_limit_fields(out, f.d, style::legacy);
    CHECK(out.rfind("Via: 1.1 sluice\r\nX-RateLimit-Limit: ", 0) == 0);
}

TEST_CASE("retry_after_seconds: the retry rounded up to whole seconds, at least 1, whatever the quota's reset") {
    auto with = [](usec retry) {
        decision d;
        d.allowed = false;
        d.retry_after = retry;
        return sluice::limit::retry_after_seconds(d);
    };
    CHECK(with(1) == 1);
    CHECK(with(999'999) == 1);
    CHECK(with(SEC) == 1);
    CHECK(with(SEC + 1) == 2);
    CHECK(with(59 * SEC + 500'000) == 60);
    CHECK(with(0) == 1);  // a Retry-After of 0 would invite an immediate retry

    // Refused by min_interval with quota left: the request passes in 1.5 s though the
    // minute's quota resets in 57 s (issue 21: Retry-After said 57).
    tier t = make_tier("ip-1m", 100, 60 * SEC);
    decision d;
    d.allowed = false;
    d.retry_after = 1'500'000;
    d.tiers.push_back({&t, 0, 99, 57 * SEC, false});
    CHECK(sluice::limit::retry_after_seconds(d) == 2);
}

TEST_CASE("rate-limit fields: a window that is not whole seconds is stated truly in whole seconds") {
    auto policy_of = [](std::int64_t limit, usec per) {
        tier t = make_tier("t", limit, per);
        decision d;
        d.tiers.push_back({&t, 0, 0, 0, true});
        auto p = parse_sf_list(lines_of(fields_of(d, style::ietf)).at("RateLimit-Policy"));
        REQUIRE(p.size() == 1);
        return std::pair{p[0].params.at("q"), p[0].params.at("w")};
    };
    CHECK(policy_of(2, 250'000) == std::pair<std::int64_t, std::int64_t>{8, 1});
    CHECK(policy_of(1, 100'000) == std::pair<std::int64_t, std::int64_t>{10, 1});
    CHECK(policy_of(5, 2'500'000) == std::pair<std::int64_t, std::int64_t>{10, 5});
    CHECK(policy_of(10, 60 * SEC) == std::pair<std::int64_t, std::int64_t>{10, 60});
    // 1.001 s: the common span (1001 s) is too long to state; the average rate over 2 s,
    // rounded down, never promises more than the tier gives.
    CHECK(policy_of(10, 1'001'000) == std::pair<std::int64_t, std::int64_t>{19, 2});
}

TEST_CASE("a concurrency tier: qu=\"concurrent-requests\" and no window, no reset and no Retry-After when it refuses") {
    tier c = make_tier("ip-concurrency", 2, 30 * SEC);
    c.algo = sluice::config::algorithm::concurrency;
    tier m = make_tier("ip-1m", 100, 60 * SEC);
    decision d;
    d.allowed = false;
    d.retry_after = 0;
    d.tiers.push_back({&c, 0, 0, 0, false});
    d.tiers.push_back({&m, 0, 90, 20 * SEC, true});
    auto ietf = lines_of(fields_of(d, style::ietf));
    CHECK(ietf["RateLimit-Policy"] == "\"ip-concurrency\";q=2;qu=\"concurrent-requests\", \"ip-1m\";q=100;w=60");
    CHECK(ietf["RateLimit"] == "\"ip-concurrency\";r=0, \"ip-1m\";r=90;t=20");
    auto legacy = lines_of(fields_of(d, style::legacy));
    CHECK(legacy["X-RateLimit-Limit"] == "2");
    CHECK(legacy["X-RateLimit-Remaining"] == "0");
    CHECK(legacy.count("X-RateLimit-Reset") == 0);
    CHECK(d.retry_unknown());
    CHECK(sluice::limit::retry_after_seconds(d) == 0);

    // Refused by the minute tier alone: its Retry-After stands.
    d.tiers[0] = {&c, 0, 1, 0, true};
    d.tiers[1] = {&m, 0, 0, 20 * SEC, false};
    d.retry_after = 20 * SEC;
    CHECK_FALSE(d.retry_unknown());
    CHECK(sluice::limit::retry_after_seconds(d) == 20);
    // Both refuse: the minute tier's wait stands (the request cannot pass before it).
    d.tiers[0] = {&c, 0, 0, 0, false};
    CHECK_FALSE(d.retry_unknown());
    CHECK(sluice::limit::retry_after_seconds(d) == 20);

    // The fields name a refusing tier, though an admitting one has r=0 and a later reset.
    tier s = make_tier("ip-1s", 100, SEC);
    decision e;
    e.allowed = false;
    e.tiers.push_back({&c, 0, 0, 0, false});
    e.tiers.push_back({&s, 0, 0, SEC, true});
    CHECK(lines_of(fields_of(e, style::ietf))["RateLimit"] == "\"ip-concurrency\";r=0, \"ip-1s\";r=0;t=1");
}
