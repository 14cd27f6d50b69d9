// upstream and upstreams at load: pools, their servers and every key's default, and each
// error at its key as FILE:LINE:COLUMN: path: reason. More error cases are fixtures
// (tests/config/fixtures/upstream*.yaml, route_*upstream*.yaml), run by test_config.cpp.
#include <doctest/doctest.h>

#include <string>

#include "config/config.hpp"
#include "load_error.hpp"

namespace cfg = sluice::config;
using sluice::config::testing::error_of;
using namespace std::chrono_literals;

namespace {

// "inline.yaml:LINE:COLUMN: " where `needle` first appears on line `line` of `yaml`.
std::string at(const std::string& yaml, int line, const std::string& needle) {
    std::size_t start = 0;
    for (int i = 1; i < line; ++i) start = yaml.find('\n', start) + 1;
    const auto text = yaml.substr(start, yaml.find('\n', start) - start);
    const auto col = text.find(needle);
    REQUIRE(col != std::string::npos);
    return "inline.yaml:" + std::to_string(line) + ":" + std::to_string(col + 1) + ": ";
}

// A pool "api" whose keys are `keys` (one mapping, on line 2), and nothing else.
std::string api_pool(const std::string& keys) { return "upstreams:\n  api: {" + keys + "}\n"; }

// The error of api_pool(keys), expected at `needle` on line 2 with `path` and `reason`.
void check_pool_error(const std::string& keys, const std::string& needle, const std::string& path,
                      const std::string& reason) {
    const auto yaml = api_pool(keys);
    CAPTURE(yaml);
    CHECK(error_of(yaml) == at(yaml, 2, needle) + path + ": " + reason);
}

}  // namespace

TEST_CASE("upstream: the pool default, a pool of one with every default") {
    const auto c = cfg::load_string("upstream: {url: 'http://h:3000'}\n", "inline.yaml");
    REQUIRE(c->upstreams.size() == 1);
    const auto& p = c->upstreams.front();
    CHECK(p.name == "default");
    CHECK(p.at == "inline.yaml:1:11: upstream");
    REQUIRE(p.servers.size() == 1);
    CHECK(p.servers[0].url == *cfg::parse_upstream_url("http://h:3000"));
    CHECK(p.servers[0].weight == 1);
    CHECK(p.servers[0].at == "inline.yaml:1:17: upstream.url");
    CHECK(p.url == p.servers[0].url);
    CHECK(p.balance == cfg::balance_kind::round_robin);
    CHECK(p.resolve_every == 30s);
    CHECK(p.connect_timeout == 1s);
    CHECK(p.timeout == 30s);
    CHECK(p.max_idle_per_worker == 64);
    CHECK(p.tls == cfg::upstream_tls_config{});
    CHECK(p.health.path.empty());
    CHECK(p.health.interval == 5s);
    CHECK(p.health.timeout == 1s);
    CHECK(p.health.healthy == 2);
    CHECK(p.health.unhealthy == 3);
    CHECK(p.health.expect_status == cfg::status_set{{{200, 399}}});
    CHECK(p.health.eject_after == 5);
    CHECK(p.health.eject_for == 30s);
    CHECK(p.health.max_ejected_percent == 50);
    CHECK(p.slow_start == 0ms);
    CHECK(p.retries == 1);
    CHECK(p.retry_budget_percent == 20);
    CHECK(p.max_in_flight == 0);
    CHECK(p.queue.size == 0);
    CHECK(p.queue.timeout == 1s);
    CHECK(c->find_upstream("") == &p);
    CHECK(c->find_upstream("default") == &p);
    CHECK(c->find_upstream("api") == nullptr);
}

TEST_CASE("upstreams: pools in file order after the upstream: block, every key read") {
    const std::string path = std::string(SLUICE_TEST_DIR) + "/config/fixtures/valid_upstreams.yaml";
    const auto c = cfg::load_file(path);
    REQUIRE(c->upstreams.size() == 3);
    CHECK(c->upstreams[0].name == "default");  // written last, still first
    CHECK(c->upstreams[0].url.authority == "backend.internal:3000");
    CHECK(c->upstreams[1].name == "api");
    CHECK(c->upstreams[2].name == "web-2_b");

    const auto& api = c->upstreams[1];
    CHECK(api.at == path + ":5:5: upstreams.api");
    REQUIRE(api.servers.size() == 3);
    CHECK(api.servers[0].url == *cfg::parse_upstream_url("http://10.0.0.1:3000"));
    CHECK(api.servers[0].weight == 3);
    CHECK(api.servers[0].at == path + ":6:9: upstreams.api.servers[0]");
    CHECK(api.servers[1].url == *cfg::parse_upstream_url("https://api-2.internal:3443/v2"));
    CHECK(api.servers[1].weight == 1);
    CHECK(api.servers[1].at == path + ":7:9: upstreams.api.servers[1]");
    CHECK(api.servers[2].url.host == "fd00::7");
    CHECK(api.servers[2].at == path + ":8:9: upstreams.api.servers[2]");
    CHECK(api.url == api.servers[0].url);
    CHECK(api.balance == cfg::balance_kind::least_request);
    CHECK(api.resolve_every == 10s);
    CHECK(api.connect_timeout == 250ms);
    CHECK(api.timeout == 5s);
    CHECK(api.max_idle_per_worker == 8);
    CHECK(api.tls.server_name == "api.internal");
    CHECK_FALSE(api.tls.verify);
    CHECK(api.health.path == "/healthz?deep=1");
    CHECK(api.health.interval == 2s);
    CHECK(api.health.timeout == 2s);  // equal to interval is allowed
    CHECK(api.health.healthy == 1);
    CHECK(api.health.unhealthy == 5);
    CHECK(api.health.expect_status == cfg::status_set{{{204, 204}, {300, 399}}});
    CHECK(api.health.eject_after == 0);
    CHECK(api.health.eject_for == 1min);
    CHECK(api.health.max_ejected_percent == 100);
    CHECK(api.slow_start == 30s);
    CHECK(api.retries == 0);
    CHECK(api.retry_budget_percent == 5);
    CHECK(api.max_in_flight == 1000);
    CHECK(api.max_in_flight_lease == 10s);
    CHECK(api.queue.size == 100'000);
    CHECK(api.queue.timeout == 250ms);

    const auto& web = c->upstreams[2];
    CHECK(web.servers.size() == 1);
    CHECK(web.url.authority == "web.internal");
    CHECK(web.balance == cfg::balance_kind::hash);
    CHECK(web.retry_budget_percent == 100);
    CHECK(web.health.expect_status == cfg::status_set{{{500, 599}}});
    CHECK(web.health.path.empty());

    REQUIRE(c->routes.size() == 4);
    CHECK(c->routes[0].upstream == "api");
    CHECK(c->routes[1].upstream == "web-2_b");
    CHECK(c->routes[2].upstream == "default");
    CHECK(c->routes[3].upstream.empty());
    CHECK(c->find_upstream(c->routes[1].upstream) == &web);
    CHECK(c->find_upstream(c->routes[3].upstream) == &c->upstreams[0]);
}

TEST_CASE("upstreams without an upstream: block, routes then name their pool") {
    const auto c = cfg::load_string(
        api_pool("url: 'http://a'") + "routes: [{match: {path: /}, policy: none, upstream: api}]\n", "inline.yaml");
    REQUIRE(c->upstreams.size() == 1);
    CHECK(c->upstreams[0].name == "api");
    CHECK(c->find_upstream("") == nullptr);
    // upstreams.default stands for the upstream: block, in file order.
    const auto d = cfg::load_string(
        "upstreams:\n  z: {url: 'http://z'}\n  default: {url: 'http://d'}\n"
        "routes: [{match: {path: /}, policy: none}]\n",
        "inline.yaml");
    REQUIRE(d->upstreams.size() == 2);
    CHECK(d->upstreams[1].name == "default");
    CHECK(d->find_upstream("") == &d->upstreams[1]);
}

TEST_CASE("upstreams: servers as a list, plain urls or mappings, http and https mixed") {
    const auto c = cfg::load_string(
        api_pool("servers: ['http://a', {url: 'https://b', weight: 1000}], tls: {server_name: b}"), "inline.yaml");
    const auto& p = c->upstreams.front();
    REQUIRE(p.servers.size() == 2);
    CHECK_FALSE(p.servers[0].url.tls);
    CHECK(p.servers[1].url.tls);
    CHECK(p.servers[1].weight == 1000);
    CHECK(p.url == p.servers[0].url);
    CHECK(p.tls.server_name == "b");
}

TEST_CASE("upstreams: url or servers, exactly one") {
    check_pool_error("url: 'http://a', servers: ['http://b']", "servers", "upstreams.api.servers",
                     "give either url or servers, not both");
    check_pool_error("servers: ['http://b'], url: 'http://a'", "url", "upstreams.api.url",
                     "give either url or servers, not both");
    check_pool_error("balance: hash", "{", "upstreams.api.url", "required key is missing (give url or servers)");
    check_pool_error("servers: []", "[]", "upstreams.api.servers", "must not be empty");
    check_pool_error("servers: ['http://a', \"http://a\"]", "\"http://a\"", "upstreams.api.servers[1]", "listed twice");
    check_pool_error("servers: [{weight: 2}]", "{weight", "upstreams.api.servers[0].url", "required key is missing");
    check_pool_error("servers: [{url: 'ftp://a'}]", "'ftp", "upstreams.api.servers[0].url",
                     "url scheme must be http or https");
    check_pool_error("servers: 'http://a'", "'http", "upstreams.api.servers", "expected a list");
}

TEST_CASE("upstreams: weight 1 to 1000, balance one of three") {
    check_pool_error("servers: [{url: 'http://a', weight: 1001}]", "1001", "upstreams.api.servers[0].weight",
                     "must be between 1 and 1000");
    check_pool_error("servers: [{url: 'http://a', weight: 0}]", "0}", "upstreams.api.servers[0].weight",
                     "must be between 1 and 1000");
    check_pool_error("servers: [{url: 'http://a', weight: -1}]", "-1", "upstreams.api.servers[0].weight",
                     "expected a non-negative integer");
    check_pool_error("url: 'http://a', balance: random", "random", "upstreams.api.balance",
                     "must be one of round_robin, least_request, hash");
    check_pool_error("url: 'http://a', balance: [hash]", "[hash]", "upstreams.api.balance",
                     "expected one of round_robin, least_request, hash");
}

TEST_CASE("upstreams.<name>.health.expect_status: a status, a class, or a list of them") {
    const auto status_of = [](const std::string& value) {
        return cfg::load_string(api_pool("url: 'http://a', health: {expect_status: " + value + "}"), "inline.yaml")
            ->upstreams.front()
            .health.expect_status;
    };
    CHECK(status_of("204") == cfg::status_set{{{204, 204}}});
    CHECK(status_of("100") == cfg::status_set{{{100, 100}}});
    CHECK(status_of("599") == cfg::status_set{{{599, 599}}});
    CHECK(status_of("'2xx'") == cfg::status_set{{{200, 299}}});
    CHECK(status_of("5xx") == cfg::status_set{{{500, 599}}});
    CHECK(status_of("[200, 3xx, '404']") == cfg::status_set{{{200, 200}, {300, 399}, {404, 404}}});
    CHECK(status_of("[401, 401]").contains(401));
    CHECK_FALSE(status_of("2xx").contains(300));

    const std::string path = "upstreams.api.health.expect_status";
    const std::string bad = "expected a status like 200, a class like 5xx, or a list of them";
    check_pool_error("url: 'http://a', health: {expect_status: 600}", "600", path, "must be between 100 and 599");
    check_pool_error("url: 'http://a', health: {expect_status: 99}", "99", path, "must be between 100 and 599");
    check_pool_error("url: 'http://a', health: {expect_status: 1xx}", "1xx", path, bad);
    check_pool_error("url: 'http://a', health: {expect_status: 6xx}", "6xx", path, bad);
    check_pool_error("url: 'http://a', health: {expect_status: 2XX}", "2XX", path, bad);
    check_pool_error("url: 'http://a', health: {expect_status: ok}", "ok", path, bad);
    check_pool_error("url: 'http://a', health: {expect_status: []}", "[]", path, "must not be empty");
    check_pool_error("url: 'http://a', health: {expect_status: [200, x]}", "x]", path + "[1]", bad);
    check_pool_error("url: 'http://a', health: {expect_status: {a: 1}}", "{a", path, bad);
}

TEST_CASE("upstreams.<name>.health: path, counts, and a timeout within the interval") {
    const std::string h = "upstreams.api.health.";
    check_pool_error("url: 'http://a', health: {path: healthz}", "healthz", h + "path",
                     "expected a path starting with /, like /healthz");
    check_pool_error("url: 'http://a', health: {path: '/a b'}", "'/a b'", h + "path",
                     "expected a path starting with /, like /healthz");
    check_pool_error("url: 'http://a', health: {timeout: 6s}", "6s", h + "timeout", "must not exceed interval (5s)");
    check_pool_error("url: 'http://a', health: {timeout: 3s, interval: 2s}", "3s", h + "timeout",
                     "must not exceed interval (2s)");
    check_pool_error("url: 'http://a', health: {interval: 500ms}", "500ms", h + "interval",
                     "must be at least timeout (1s)");
    check_pool_error("url: 'http://a', health: {interval: 0s}", "0s", h + "interval", "must be greater than 0");
    check_pool_error("url: 'http://a', health: {healthy: 0}", "0}", h + "healthy", "must be between 1 and 100");
    check_pool_error("url: 'http://a', health: {unhealthy: 101}", "101", h + "unhealthy", "must be between 1 and 100");
    check_pool_error("url: 'http://a', health: {passive: {max_ejected_percent: 101}}", "101",
                     h + "passive.max_ejected_percent", "must be between 0 and 100");
    check_pool_error("url: 'http://a', health: {passive: {eject_for: 0s}}", "0s", h + "passive.eject_for",
                     "must be greater than 0");
    check_pool_error("url: 'http://a', health: {passive: {eject_after: 1001}}", "1001", h + "passive.eject_after",
                     "must be between 0 and 1000");
    check_pool_error("url: 'http://a', health: {passive: {eject: 1}}", "eject", h + "passive.eject", "unknown key");
}

TEST_CASE("upstreams: retries, retry_budget, max_in_flight, queue, slow_start, resolve_every") {
    const auto pool = [](const std::string& keys) {
        return cfg::load_string(api_pool("url: 'http://a', " + keys), "inline.yaml")->upstreams.front();
    };
    CHECK(pool("retry_budget: 0%").retry_budget_percent == 0);
    CHECK(pool("retry_budget: '100%'").retry_budget_percent == 100);
    CHECK(pool("retry_budget: 35").retry_budget_percent == 35);
    CHECK(pool("retries: 10").retries == 10);
    CHECK(pool("max_in_flight: 0, queue: {timeout: 2s}").queue.timeout == 2s);
    CHECK(pool("max_in_flight: 5, queue: {size: 1}").queue.size == 1);
    CHECK(pool("slow_start: 1m").slow_start == 1min);

    check_pool_error("url: 'http://a', retries: 11", "11", "upstreams.api.retries", "must be between 0 and 10");
    check_pool_error("url: 'http://a', retry_budget: 101%", "101%", "upstreams.api.retry_budget",
                     "must be between 0% and 100%");
    check_pool_error("url: 'http://a', retry_budget: 99999999999999999999%", "999", "upstreams.api.retry_budget",
                     "must be between 0% and 100%");
    for (const char* bad : {"'-1%'", "'%'", "'20 %'", "twenty", "'2.5%'"}) {
        CAPTURE(bad);
        check_pool_error(std::string("url: 'http://a', retry_budget: ") + bad, bad, "upstreams.api.retry_budget",
                         R"(expected a percentage like "20%")");
    }
    check_pool_error("url: 'http://a', max_in_flight: 1001", "1001", "upstreams.api.max_in_flight",
                     "must be between 0 and 1000");
    CHECK(pool("max_in_flight: 5, max_in_flight_lease: 3s").max_in_flight_lease == 3s);
    CHECK(pool("max_in_flight: 5").max_in_flight_lease == 30s);
    check_pool_error("url: 'http://a', max_in_flight_lease: 2s", "2s", "upstreams.api.max_in_flight_lease",
                     "must be between 3s and 1h");
    check_pool_error("url: 'http://a', queue: {size: 100001}", "100001", "upstreams.api.queue.size",
                     "must be between 0 and 100000");
    check_pool_error("url: 'http://a', queue: {size: 3}", "3}", "upstreams.api.queue.size",
                     "needs max_in_flight (a queue holds requests waiting for a slot under that cap)");
    check_pool_error("url: 'http://a', max_in_flight: 0, queue: {size: 3}", "3}", "upstreams.api.queue.size",
                     "needs max_in_flight (a queue holds requests waiting for a slot under that cap)");
    check_pool_error("url: 'http://a', max_in_flight: 1, queue: {timeout: 0s}", "0s", "upstreams.api.queue.timeout",
                     "must be greater than 0");
    check_pool_error("url: 'http://a', resolve_every: 0s", "0s", "upstreams.api.resolve_every",
                     "must be greater than 0");
    check_pool_error("url: 'http://a', slow_start: soon", "soon", "upstreams.api.slow_start",
                     "expected a duration like 250ms, 1s, 5m, 1h, 1d");
}

TEST_CASE("upstreams: tls needs an https server") {
    check_pool_error("servers: ['http://a', 'http://b'], tls: {verify: false}", "tls", "upstreams.api.tls",
                     "applies to an https:// upstream url only");
    CHECK(error_of(api_pool("servers: ['http://a', 'https://b'], tls: {verify: false}")) == "<no error>");
}

TEST_CASE("upstreams: pool names") {
    const std::string reason = "a pool name may only use a-z, 0-9, _ and -, at most 64 characters";
    CHECK(error_of("upstreams:\n  Api: {url: 'http://a'}\n") == "inline.yaml:2:3: upstreams.Api: " + reason);
    CHECK(error_of("upstreams:\n  a.b: {url: 'http://a'}\n") == "inline.yaml:2:3: upstreams.a.b: " + reason);
    const std::string long_name(65, 'a');
    CHECK(error_of("upstreams:\n  " + long_name + ": {url: 'http://a'}\n") ==
          "inline.yaml:2:3: upstreams." + long_name + ": " + reason);
    CHECK(error_of("upstreams:\n  " + long_name.substr(1) + ": {url: 'http://a'}\n") == "<no error>");
    CHECK(error_of("upstreams:\n  a: {url: 'http://a'}\n  a: {url: 'http://b'}\n") ==
          "inline.yaml:3:3: upstreams.a: duplicate key");
    CHECK(error_of("upstreams: [a]\n") == "inline.yaml:1:12: upstreams: expected a mapping");
}

TEST_CASE("upstream: and upstreams.default are one pool: not both") {
    CHECK(error_of("upstream: {url: 'http://a'}\nupstreams: {default: {url: 'http://b'}}\n") ==
          "inline.yaml:2:13: upstreams.default: the upstream: block is the pool \"default\" already");
    CHECK(error_of("upstreams: {default: {url: 'http://b'}}\nupstream: {url: 'http://a'}\n") ==
          "inline.yaml:2:1: upstream: upstreams.default is given already: the upstream: block is the pool "
          "\"default\"");
}

TEST_CASE("routes[].upstream: a pool that exists, and none named needs the pool default") {
    const std::string pools = "upstreams:\n  api: {url: 'http://a'}\n";
    auto yaml = pools + "routes:\n  - {match: {path: /}, policy: none, upstream: apx}\n";
    CHECK(error_of(yaml) == at(yaml, 4, "apx") + "routes[0].upstream: no upstream named \"apx\"");
    yaml = pools + "routes:\n  - {match: {path: /}, policy: none, upstream: default}\n";
    CHECK(error_of(yaml) == at(yaml, 4, "default") + "routes[0].upstream: no upstream named \"default\"");
    yaml =
        pools + "routes:\n  - {match: {path: /a}, policy: none, upstream: api}\n  - {match: {path: /}, policy: none}\n";
    CHECK(error_of(yaml) == at(yaml, 5, "{") +
                                "routes[1]: names no upstream, and there is no pool \"default\": name one of upstreams "
                                "(upstream: NAME), or add an upstream: block");
    yaml = pools + "routes:\n  - {match: {path: /}, policy: none, upstream: ''}\n";
    CHECK(error_of(yaml) == at(yaml, 4, "''") + "routes[0].upstream: must not be empty");
    // With the pool default, a route may name it, or none.
    CHECK(error_of("upstream: {url: 'http://d'}\n" + pools +
                   "routes:\n  - {match: {path: /}, policy: none, upstream: default}\n"
                   "  - {match: {path: /a}, policy: none}\n  - {match: {path: /b}, policy: none, upstream: api}\n") ==
          "<no error>");
    // No route at all, no default: requests are answered 404 by the runtime, which is no error.
    CHECK(error_of(pools) == "<no error>");
}

TEST_CASE("no upstream: and no upstreams: an error at the top level") {
    CHECK(error_of("log: {level: warn}\n") == "inline.yaml:1:1: upstream: required key is missing");
    CHECK(error_of("log: {level: warn}\nupstreams:\n") == "inline.yaml:1:1: upstream: required key is missing");
    CHECK(error_of("upstreams: {}\n") == "inline.yaml:1:1: upstream: required key is missing");
}
