#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace cfg = sluice::config;
using namespace std::chrono_literals;

namespace {

const std::string fixtures_dir = std::string(SLUICE_TEST_DIR) + "/config/fixtures";

// The what() of the config_error that loading throws, or a marker if nothing is thrown.
template <class Load>
std::string error_of(Load load) {
    try {
        load();
    } catch (const cfg::config_error& e) {
        return e.what();
    }
    return "<no error>";
}

std::string file_error(const std::string& path) {
    return error_of([&] { cfg::load_file(path); });
}

std::string string_error(const std::string& yaml) {
    return error_of([&] { cfg::load_string(yaml, "inline.yaml"); });
}

// A fixture's expectation: its first line is "# expect: <message>", where the message
// says FILE for the path given to load_file.
std::string expectation_of(const std::filesystem::path& fixture) {
    std::ifstream in(fixture);
    std::string first;
    std::getline(in, first);
    const std::string prefix = "# expect: FILE";
    if (first.rfind(prefix, 0) != 0) return "<fixture lacks '" + prefix + "' on line 1>";
    return fixture.string() + first.substr(prefix.size());
}

std::vector<std::filesystem::path> error_fixtures() {
    std::vector<std::filesystem::path> out;
    for (const auto& entry : std::filesystem::directory_iterator(fixtures_dir)) {
        const std::string name = entry.path().filename().string();
        if (entry.path().extension() == ".yaml" && name.rfind("valid_", 0) != 0) {
            out.push_back(entry.path());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("parse_duration accepts an integer with one unit") {
    CHECK(cfg::parse_duration("250ms") == 250ms);
    CHECK(cfg::parse_duration("1s") == 1s);
    CHECK(cfg::parse_duration("5m") == 5min);
    CHECK(cfg::parse_duration("1h") == 1h);
    CHECK(cfg::parse_duration("1d") == 24h);
    CHECK(cfg::format_duration(24h) == "24h");  // days are not written: tier ids say 24h
    CHECK(cfg::parse_duration("0s") == 0ms);
    CHECK(cfg::parse_duration("0ms") == 0ms);
    CHECK(cfg::parse_duration("007s") == 7s);
    CHECK(cfg::parse_duration("1500ms") == 1500ms);
}

TEST_CASE("parse_duration rejects anything else") {
    for (const char* s : {"", "10", "s", "ms", "1.5s", "-1s", "+1s", " 1s", "1s ", "1 s", "1S", "1sec", "1D", "1us",
                          "1m30s", "1e3ms", "0x10s"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_duration(s).has_value());
    }
}

TEST_CASE("parse_duration bounds: ten years, so that now() + d cannot overflow the clock") {
    CHECK(cfg::parse_duration("315360000000ms") == 315360000000ms);
    CHECK_FALSE(cfg::parse_duration("315360000001ms").has_value());
    CHECK(cfg::parse_duration("87600h") == 87600h);
    CHECK_FALSE(cfg::parse_duration("87601h").has_value());
    CHECK(cfg::parse_duration("3650d") == 87600h);
    CHECK_FALSE(cfg::parse_duration("3651d").has_value());
    CHECK_FALSE(cfg::parse_duration("2562047h").has_value());  // passed once, then overflowed every deadline
    CHECK_FALSE(cfg::parse_duration("99999999999999999999s").has_value());
}

TEST_CASE("parse_size accepts bytes and binary units") {
    CHECK(cfg::parse_size("0") == 0u);
    CHECK(cfg::parse_size("16384") == 16384u);
    CHECK(cfg::parse_size("64KiB") == 65536u);
    CHECK(cfg::parse_size("10MiB") == 10485760u);
    CHECK(cfg::parse_size("1GiB") == 1073741824u);
    CHECK(cfg::parse_size("18446744073709551615") == UINT64_MAX);
    CHECK(cfg::parse_size("17179869183GiB") == ((std::uint64_t{1} << 34) - 1) << 30);
}

TEST_CASE("parse_size rejects overflow, ambiguous units and malformed text") {
    for (const char* s : {"18446744073709551616", "17179869184GiB", "99999999999999999999KiB", "", "KiB", "1.5MiB",
                          "-1", "+1", "10KB", "10MB", "10GB", "10 KiB", "10kib", "10B", "10TiB", "0x10", " 10"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_size(s).has_value());
    }
}

TEST_CASE("parse_address accepts IPv4 and bracketed IPv6 literals") {
    auto a = cfg::parse_address("0.0.0.0:8080");
    REQUIRE(a);
    CHECK(a->host == "0.0.0.0");
    CHECK(a->port == 8080);

    auto b = cfg::parse_address("[::1]:9090");
    REQUIRE(b);
    CHECK(b->host == "::1");
    CHECK(b->port == 9090);

    auto c = cfg::parse_address("127.0.0.1:0");
    REQUIRE(c);
    CHECK(c->port == 0);

    auto d = cfg::parse_address("[2001:db8::10]:65535");
    REQUIRE(d);
    CHECK(d->host == "2001:db8::10");
    CHECK(d->port == 65535);
}

TEST_CASE("parse_address rejects names, bad ports and unbracketed IPv6") {
    for (const char* s : {"1.2.3.4:65536",
                          "1.2.3.4:99999999999999999999",
                          "::1:80",
                          "::1",
                          "localhost:80",
                          "1.2.3.4",
                          "1.2.3.4:",
                          ":80",
                          "[::1]",
                          "[::1]:",
                          "[1.2.3.4]:80",
                          "1.2.3:80",
                          "256.0.0.1:80",
                          "01.2.3.4:80",
                          "1.2.3.4:+80",
                          "1.2.3.4:-1",
                          "1.2.3.4:80 ",
                          "[::1]:80x",
                          "",
                          "[::1:80",
                          "[]:80",
                          "[::1]80"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_address(s).has_value());
    }
}

TEST_CASE("address::to_string brackets IPv6") {
    CHECK(cfg::address{"127.0.0.1", 8080}.to_string() == "127.0.0.1:8080");
    CHECK(cfg::address{"::1", 8080}.to_string() == "[::1]:8080");
    CHECK(cfg::address{"0.0.0.0", 0}.to_string() == "0.0.0.0:0");
    CHECK(cfg::parse_address("[fe80::1]:443")->to_string() == "[fe80::1]:443");
}

TEST_CASE("parse_upstream_url splits host, port, base path and authority") {
    auto a = cfg::parse_upstream_url("http://127.0.0.1:3000");
    REQUIRE(a);
    CHECK(a->host == "127.0.0.1");
    CHECK(a->port == 3000);
    CHECK(a->base_path == "");
    CHECK(a->authority == "127.0.0.1:3000");

    auto b = cfg::parse_upstream_url("http://backend.internal");
    REQUIRE(b);
    CHECK(b->host == "backend.internal");
    CHECK(b->port == 80);
    CHECK(b->authority == "backend.internal");

    auto c = cfg::parse_upstream_url("http://[::1]:8080/api/");
    REQUIRE(c);
    CHECK(c->host == "::1");
    CHECK(c->port == 8080);
    CHECK(c->base_path == "/api");
    CHECK(c->authority == "[::1]:8080");

    auto d = cfg::parse_upstream_url("http://h/");
    REQUIRE(d);
    CHECK(d->base_path == "");

    auto e = cfg::parse_upstream_url("http://h:80/a/b%20c");
    REQUIRE(e);
    CHECK(e->base_path == "/a/b%20c");
    CHECK(e->authority == "h:80");

    auto f = cfg::parse_upstream_url("HTTP://my_host:65535");
    REQUIRE(f);
    CHECK(f->host == "my_host");
    CHECK(f->port == 65535);
}

TEST_CASE("parse_upstream_url: https, on port 443 unless the url names another") {
    auto a = cfg::parse_upstream_url("https://api.example.com");
    REQUIRE(a);
    CHECK(a->tls);
    CHECK(a->host == "api.example.com");
    CHECK(a->port == 443);
    CHECK(a->authority == "api.example.com");

    auto b = cfg::parse_upstream_url("HTTPS://[::1]:8443/v1/");
    REQUIRE(b);
    CHECK(b->tls);
    CHECK(b->host == "::1");
    CHECK(b->port == 8443);
    CHECK(b->base_path == "/v1");

    CHECK_FALSE(cfg::parse_upstream_url("http://h")->tls);
    CHECK(cfg::parse_upstream_url("http://h")->port == 80);
}

TEST_CASE("parse_upstream_url rejects other schemes and extra parts") {
    for (const char* s :
         {"ftp://h",        "ws://h",         "http://",        "http:///x",  "http:h",     "http://u@h",
          "http://u:p@h",   "http://h?x=1",   "http://h/?",     "http://h#f", "http://h:0", "http://h:65536",
          "http://h:",      "127.0.0.1:3000", "localhost:3000", "",           "http://h h", "http://h%41",
          "http://[v1.x]/", "http://h!/",     "http://[::1/"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_upstream_url(s).has_value());
    }
}

TEST_CASE("parse_cidr accepts networks and bare addresses") {
    auto a = cfg::parse_cidr("10.0.0.0/8");
    REQUIRE(a);
    CHECK(a->network.to_string() == "10.0.0.0");
    CHECK(a->prefix == 8);

    auto b = cfg::parse_cidr("::1/128");
    REQUIRE(b);
    CHECK(b->network.is_v6());
    CHECK(b->network.to_string() == "::1");
    CHECK(b->prefix == 128);

    auto c = cfg::parse_cidr("192.168.1.7");
    REQUIRE(c);
    CHECK(c->prefix == 32);

    auto d = cfg::parse_cidr("2001:db8::");
    REQUIRE(d);
    CHECK(d->prefix == 128);

    auto e = cfg::parse_cidr("2001:db8::/32");
    REQUIRE(e);
    CHECK(e->network.to_string() == "2001:db8::");
    CHECK(e->prefix == 32);

    auto f = cfg::parse_cidr("0.0.0.0/0");
    REQUIRE(f);
    CHECK(f->prefix == 0);
    CHECK(cfg::parse_cidr("::/0"));
    CHECK(cfg::parse_cidr("::ffff:10.0.0.0/104"));
}

TEST_CASE("parse_cidr rejects host bits, long prefixes and malformed text") {
    for (const char* s : {"10.1.2.3/8",
                          "::1/64",
                          "2001:db8::1/32",
                          "10.0.0.0/33",
                          "::/129",
                          "10.0.0.0/",
                          "10.0.0.0/-1",
                          "10.0.0.0/+8",
                          "10.0.0.0/8 ",
                          " 10.0.0.0/8",
                          "10.0.0/8",
                          "256.0.0.0/8",
                          "01.0.0.0/8",
                          "localhost",
                          "fe80::1%eth0",
                          "fe80::%1/64",
                          "10.0.0.0/8/8",
                          "/8",
                          "",
                          "10.0.0.0/0x8",
                          "10.0.0.0/99999999999999999999"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_cidr(s).has_value());
    }
}

TEST_CASE("parse_host_port accepts names, IPv4 and bracketed IPv6") {
    auto a = cfg::parse_host_port("redis:6379");
    REQUIRE(a);
    CHECK(a->host == "redis");
    CHECK(a->port == 6379);

    auto b = cfg::parse_host_port("127.0.0.1:1");
    REQUIRE(b);
    CHECK(b->host == "127.0.0.1");
    CHECK(b->port == 1);

    auto c = cfg::parse_host_port("[::1]:65535");
    REQUIRE(c);
    CHECK(c->host == "::1");
    CHECK(c->port == 65535);

    auto d = cfg::parse_host_port("redis-0.redis.svc.cluster.local:7000");
    REQUIRE(d);
    CHECK(d->host == "redis-0.redis.svc.cluster.local");
}

TEST_CASE("parse_host_port rejects missing or out-of-range ports and bad hosts") {
    for (const char* s : {"redis", "redis:", "redis:0", "redis:65536", "redis:99999999999999999999", ":6379",
                          "::1:6379", "[::1]", "[::1]6379", "[redis]:6379", "[]:6379", "re dis:6379", "redis:+6379",
                          "redis:6379 ", "redis:63x9", "", "redis:6379/0", "user@redis:6379"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_host_port(s).has_value());
    }
}

TEST_CASE("format_duration uses the largest unit that divides exactly") {
    CHECK(cfg::format_duration(3600000ms) == "1h");
    CHECK(cfg::format_duration(60000ms) == "1m");
    CHECK(cfg::format_duration(90000ms) == "90s");
    CHECK(cfg::format_duration(250ms) == "250ms");
    CHECK(cfg::format_duration(1000ms) == "1s");
    CHECK(cfg::format_duration(1001ms) == "1001ms");
    CHECK(cfg::format_duration(90min) == "90m");
    CHECK(cfg::format_duration(48h) == "48h");
    CHECK(cfg::format_duration(0ms) == "0ms");
    for (const char* s : {"1h", "90m", "61s", "1500ms", "8784h"}) {
        CAPTURE(s);
        CHECK(cfg::format_duration(*cfg::parse_duration(s)) == s);
    }
}

TEST_CASE("valid_full.yaml sets every field") {
    const std::string path = fixtures_dir + "/valid_full.yaml";
    std::shared_ptr<const cfg::config> c = cfg::load_file(path);
    REQUIRE(c);
    CHECK(c->source == path);

    CHECK(c->server.listen.host == "127.0.0.1");
    CHECK(c->server.listen.port == 18080);
    CHECK(c->server.threads == 4);
    CHECK(c->server.max_connections == 2500);
    CHECK(c->server.header_timeout == 250ms);
    CHECK(c->server.idle_timeout == 5min);
    CHECK(c->server.drain_timeout == 0ms);
    CHECK(c->server.max_header_bytes == 32768);
    CHECK(c->server.max_body_bytes == 1073741824);
    REQUIRE(c->server.proxy_protocol);
    CHECK(c->server.proxy_protocol->trusted.size() == 3);
    CHECK(c->server.proxy_protocol->trusted[1] == *cfg::parse_cidr("fd00::/8"));
    CHECK(c->server.proxy_protocol->trusted[2] == *cfg::parse_cidr("192.0.2.7/32"));
    CHECK(c->server.proxy_protocol->header_timeout == 3s);

    CHECK(c->admin.listen.host == "::1");
    CHECK(c->admin.listen.port == 19090);

    CHECK(c->upstreams.front().url.host == "backend.internal");
    CHECK(c->upstreams.front().url.port == 3000);
    CHECK(c->upstreams.front().url.base_path == "/api/v1");
    CHECK(c->upstreams.front().url.authority == "backend.internal:3000");
    CHECK(c->upstreams.front().connect_timeout == 2s);
    CHECK(c->upstreams.front().timeout == 1h);
    CHECK(c->upstreams.front().max_idle_per_worker == 0);

    CHECK(c->log.level == "debug");

    using store = cfg::store_config;
    CHECK(c->store.type == store::kind::redis_cluster);
    CHECK(c->store.memory_max_keys == 5000);
    REQUIRE(c->store.redis_nodes.size() == 3);
    CHECK(c->store.redis_nodes[0].host == "redis-a.internal");
    CHECK(c->store.redis_nodes[0].port == 7000);
    CHECK(c->store.redis_nodes[1].host == "10.0.0.2");
    CHECK(c->store.redis_nodes[2].host == "fd00::3");
    CHECK(c->store.redis_nodes[2].port == 7002);
    CHECK(c->store.redis_password_env == "REDIS_PASSWORD");
    CHECK(c->store.redis_username == "sluice");
    CHECK(c->store.redis_database == 15);
    CHECK(c->store.redis_timeout == 120ms);
    CHECK(c->store.redis_key_prefix == "edge:");
    CHECK(c->store.on_error == store::failure_mode::deny);
    CHECK(c->store.hash_secret_env == "EDGE_HASH_KEY");

    const cfg::clients_config& cl = c->clients;
    REQUIRE(cl.trusted_proxies.size() == 3);
    CHECK(cl.trusted_proxies[0].network.to_string() == "10.0.0.0");
    CHECK(cl.trusted_proxies[0].prefix == 8);
    CHECK(cl.trusted_proxies[1].network.to_string() == "fd00::");
    CHECK(cl.trusted_proxies[1].prefix == 8);
    CHECK(cl.trusted_proxies[2].prefix == 32);
    CHECK(cl.forwarded_header == cfg::clients_config::forwarded_kind::forwarded);
    CHECK(cl.ipv6_prefix == 56);
    REQUIRE(cl.allow.size() == 2);
    CHECK(cl.allow[1].network.to_string() == "::1");
    CHECK(cl.allow[1].prefix == 128);
    CHECK(cl.api_key_header == "X-Edge-Key");
    REQUIRE(cl.jwt);
    CHECK(cl.jwt->header == "X-JWT");
    CHECK(cl.jwt->algorithms == std::vector<std::string>{"ES256", "HS384"});
    CHECK(cl.jwt->secret_env == "JWT_HMAC_KEY");
    CHECK(cl.jwt->public_key_file == "/etc/sluice/jwt.pem");
    CHECK(cl.jwt->claim == "uid");
    CHECK(cl.jwt->leeway == 10min);

    CHECK(c->response.headers == cfg::response_config::header_style::both);

    REQUIRE(c->policies.size() == 2);
    const cfg::policy_config& api = c->policies[0];
    CHECK(api.name == "api");
    CHECK(api.shadow);
    REQUIRE(api.ip.size() == 3);
    CHECK(api.ip[0].precision == 250ms);
    CHECK(api.ip[0].min_interval == 50ms);
    CHECK(api.ip[1].precision == 1s);
    CHECK(api.ip[2].burst == 40);
    REQUIRE(api.user.size() == 1);
    CHECK(api.user[0].algo == cfg::algorithm::log);
    CHECK(api.user[0].kind == "user");
    CHECK(api.user[0].limit == 900);
    const cfg::policy_config& reports = c->policies[1];
    CHECK_FALSE(reports.shadow);
    CHECK(reports.ip.empty());
    REQUIRE(reports.user.size() == 1);
    CHECK(reports.user[0].burst == 3);

    REQUIRE(c->routes.size() == 3);
    CHECK(c->routes[0].name == "reports");
    CHECK(c->routes[0].path == "/reports");
    CHECK(c->routes[0].path_prefix.empty());
    CHECK(c->routes[0].methods == std::vector<std::string>{"GET", "POST"});
    CHECK(c->routes[0].host == "reports.example.com");
    CHECK(c->routes[0].policy == "reports_v2");
    CHECK(c->routes[0].cost == 3);
    CHECK(c->routes[1].name == "/api/*");
    CHECK(c->routes[1].path_prefix == "/api/");
    CHECK(c->routes[1].methods.empty());
    CHECK(c->routes[1].host.empty());
    CHECK(c->routes[1].cost == 1);
    CHECK(c->routes[2].name == "/health");
    CHECK(c->routes[2].policy == "none");

    CHECK(c->find_policy("api") == &c->policies[0]);
    CHECK(c->find_policy("reports_v2") == &c->policies[1]);
    CHECK(c->find_policy("none") == nullptr);
    CHECK(c->find_policy("") == nullptr);
}

namespace {

// A config that writes out most sections with their usual values (the keys of
// docs/configuration.md; proxy and log.access left out).
const char* const design_example = R"(
server:   { listen: "0.0.0.0:8080", threads: 0, max_connections: 10000,
            header_timeout: 10s, idle_timeout: 60s, max_header_bytes: 16384,
            max_body_bytes: 10485760 }
admin:    { listen: "127.0.0.1:9090" }
upstream: { url: "http://127.0.0.1:3000", connect_timeout: 1s, timeout: 30s,
            max_idle_per_worker: 64 }
store:
  type: memory                      # memory | redis | redis-cluster
  memory: { max_keys: 1000000 }
  redis: { nodes: ["127.0.0.1:6379"], password_env: REDIS_PASSWORD, timeout: 50ms,
           key_prefix: "sluice:" }
  on_error: allow
  hash_secret_env: SLUICE_HASH_SECRET
clients:
  trusted_proxies: ["127.0.0.1/32"]
  forwarded_header: x-forwarded-for
  ipv6_prefix: 64
  user:
    api_key_header: X-API-Key
    jwt: { header: Authorization, algorithms: [HS256, RS256], secret_env: JWT_SECRET,
           public_key_file: "/etc/sluice/jwt.pem", claim: sub }
response: { headers: ietf }
log:      { level: info }
policies:
  default:
    ip:   [ {limit: 10, per: 1s}, {limit: 120, per: 1m, algorithm: fixed},
            {limit: 240, per: 1h, precision: 1m} ]
    user: [ {limit: 1000, per: 1h, precision: 1m} ]
  search:
    ip:   [ {limit: 5, per: 1s, algorithm: gcra, burst: 10} ]
  login:
    shadow: true
    ip:   [ {limit: 5, per: 1m, algorithm: log, min_interval: 2s} ]
routes:
  - { match: { path: /login, methods: [POST] }, policy: login }
  - { match: { path_prefix: /api/search, methods: [GET] }, policy: search, cost: 5 }
  - { match: { path_prefix: / }, policy: default }
)";

}  // namespace

TEST_CASE("an example policy: tiers and their defaults") {
    auto c = cfg::load_string(design_example, "design.yaml");
    REQUIRE(c->policies.size() == 3);

    const cfg::policy_config& def = c->policies[0];
    CHECK(def.name == "default");
    CHECK_FALSE(def.shadow);
    REQUIRE(def.ip.size() == 3);
    const cfg::tier_config& ip_1s = def.ip[0];
    CHECK(ip_1s.kind == "ip");
    CHECK(ip_1s.algo == cfg::algorithm::sliding);
    CHECK(ip_1s.limit == 10);
    CHECK(ip_1s.per == 1s);
    CHECK(ip_1s.precision == 100ms);
    CHECK(ip_1s.burst == 0);
    CHECK(ip_1s.min_interval == 0ms);
    CHECK(def.ip[1].precision == 1min);
    REQUIRE(def.user.size() == 1);
    CHECK(def.user[0].kind == "user");

    const cfg::policy_config& search = c->policies[1];
    REQUIRE(search.ip.size() == 1);
    CHECK(search.ip[0].burst == 10);
    CHECK(search.ip[0].precision == 0ms);

    const cfg::policy_config& login = c->policies[2];
    CHECK(login.shadow);
    REQUIRE(login.ip.size() == 1);
    CHECK(login.ip[0].min_interval == 2s);
    CHECK(login.user.empty());

    REQUIRE(c->routes.size() == 3);
    CHECK(c->routes[0].name == "/login");
    CHECK(c->routes[0].methods == std::vector<std::string>{"POST"});
    CHECK(c->routes[1].name == "/api/search*");
    CHECK(c->routes[1].cost == 5);
    CHECK(c->routes[2].name == "/*");
    CHECK(c->routes[2].policy == "default");
    CHECK(c->find_policy("search") == &search);
}

TEST_CASE("tier edge values load") {
    auto c = cfg::load_string(R"(
upstream: { url: "http://h" }
policies:
  edge:
    ip:
      - { limit: 1000, per: 1s, algorithm: log }
      - { limit: 1, per: 2m, precision: 1s }
      - { limit: 1, per: 10ms }
      - { limit: 1, per: 7ms, precision: 7ms }
      - { limit: 1000000000, per: 8784h, algorithm: fixed, min_interval: 0s }
      - { limit: 1, per: 1s, algorithm: gcra, burst: 1 }
)",
                              "tiers.yaml");
    const cfg::policy_config& p = c->policies.at(0);
    REQUIRE(p.ip.size() == 6);
    CHECK(p.ip[0].limit == 1000);
    CHECK(p.ip[1].per / p.ip[1].precision == 120);
    CHECK(p.ip[2].precision == 1ms);
}

TEST_CASE("routes may name policies defined later in the file") {
    auto c = cfg::load_string(R"(
routes:
  - { match: { path_prefix: /api/search, host: API.example.com }, policy: search, cost: 10 }
  - { match: { path: /health }, policy: none, cost: 1000 }
upstream: { url: "http://h" }
policies:
  search:
    ip: [ {limit: 10, per: 1s, algorithm: gcra, burst: 10} ]
    user: [ {limit: 10, per: 1m, algorithm: log} ]
)",
                              "order.yaml");
    REQUIRE(c->routes.size() == 2);
    CHECK(c->routes[0].cost == 10);
    CHECK(c->routes[0].host == "api.example.com");
    CHECK(c->routes[1].cost == 1000);
}

TEST_CASE("a minimal config keeps every default") {
    auto c = cfg::load_string("upstream: { url: 'http://127.0.0.1:3000' }\n", "mini.yaml");
    const cfg::config defaults;
    CHECK(c->source == "mini.yaml");
    CHECK(c->server.listen.to_string() == defaults.server.listen.to_string());
    CHECK(c->server.threads == defaults.server.threads);
    CHECK(c->server.max_connections == defaults.server.max_connections);
    CHECK(c->server.header_timeout == defaults.server.header_timeout);
    CHECK(c->server.idle_timeout == defaults.server.idle_timeout);
    CHECK(c->server.drain_timeout == defaults.server.drain_timeout);
    CHECK(c->server.max_header_bytes == defaults.server.max_header_bytes);
    CHECK(c->server.max_body_bytes == defaults.server.max_body_bytes);
    CHECK(c->admin.listen.to_string() == defaults.admin.listen.to_string());
    const cfg::upstream_config defaults_pool;
    CHECK(c->upstreams.front().connect_timeout == defaults_pool.connect_timeout);
    CHECK(c->upstreams.front().timeout == defaults_pool.timeout);
    CHECK(c->upstreams.front().max_idle_per_worker == defaults_pool.max_idle_per_worker);
    CHECK(c->log.level == defaults.log.level);

    CHECK(c->store.type == cfg::store_config::kind::memory);
    CHECK(c->store.memory_max_keys == 1000000);
    REQUIRE(c->store.redis_nodes.size() == 1);
    CHECK(c->store.redis_nodes[0].host == "127.0.0.1");
    CHECK(c->store.redis_nodes[0].port == 6379);
    CHECK(c->store.redis_password_env.empty());
    CHECK(c->store.redis_database == 0);
    CHECK(c->store.redis_timeout == 50ms);
    CHECK(c->store.redis_key_prefix == "sluice:");
    CHECK(c->store.on_error == cfg::store_config::failure_mode::allow);
    CHECK(c->store.fleet_size == 1);
    CHECK(c->store.hash_secret_env == "SLUICE_HASH_SECRET");
    CHECK(c->clients.trusted_proxies.empty());
    CHECK(c->clients.forwarded_header == cfg::clients_config::forwarded_kind::x_forwarded_for);
    CHECK(c->clients.ipv6_prefix == 64);
    CHECK(c->clients.api_key_header.empty());
    CHECK_FALSE(c->clients.jwt.has_value());
    CHECK(c->clients.allow.empty());
    CHECK(c->response.headers == cfg::response_config::header_style::ietf);
    CHECK(c->policies.empty());
    CHECK(c->routes.empty());
}

TEST_CASE("server.proxy_protocol: off unless set, header_timeout defaults to server.header_timeout") {
    auto c = cfg::load_string("upstream: { url: \"http://127.0.0.1:3000\" }\n", "off.yaml");
    CHECK_FALSE(c->server.proxy_protocol);
    // The default follows server.header_timeout wherever it is written in the section.
    c = cfg::load_string(R"(
upstream: { url: "http://127.0.0.1:3000" }
server:
  proxy_protocol: { trusted: ["127.0.0.1", "::1"] }
  header_timeout: 750ms
)",
                         "default.yaml");
    REQUIRE(c->server.proxy_protocol);
    CHECK(c->server.proxy_protocol->trusted.size() == 2);
    CHECK(c->server.proxy_protocol->header_timeout == 750ms);
    c = cfg::load_string(R"(
upstream: { url: "http://127.0.0.1:3000" }
server:
  proxy_protocol: { trusted: ["127.0.0.1"], header_timeout: 2s }
)",
                         "own.yaml");
    CHECK(c->server.proxy_protocol->header_timeout == 2s);
    CHECK(c->server.header_timeout == 10s);
}

TEST_CASE("store.on_error local with store.fleet_size") {
    auto c = cfg::load_string(
        "upstream: { url: 'http://h' }\n"
        "store: { on_error: local, fleet_size: 4, type: redis }\n",
        "local.yaml");
    CHECK(c->store.on_error == cfg::store_config::failure_mode::local);
    CHECK(c->store.fleet_size == 4);
    // Checked once the whole section is read: the key order does not matter.
    CHECK(string_error("upstream: {url: 'http://h'}\nstore: {on_error: local}\n") ==
          "inline.yaml:2:19: store.on_error: local needs a shared store to fall back from (store.type redis or "
          "redis-cluster)");
    // fleet_size alone is accepted (it only matters with local).
    CHECK(cfg::load_string("upstream: {url: 'http://h'}\nstore: {fleet_size: 3}\n", "f.yaml")->store.fleet_size == 3);
}

TEST_CASE("jwt defaults") {
    auto c = cfg::load_string(
        "upstream: { url: 'http://h' }\n"
        "clients: { user: { jwt: { algorithms: [HS256], secret_env: K } } }\n",
        "jwt.yaml");
    REQUIRE(c->clients.jwt);
    CHECK(c->clients.jwt->header == "Authorization");
    CHECK(c->clients.jwt->claim == "sub");
    CHECK(c->clients.jwt->leeway == 30s);
    CHECK(c->clients.jwt->public_key_file.empty());
}

TEST_CASE("empty optional sections and edge values load") {
    auto c = cfg::load_string(
        "server:\n"
        "  threads: 0\n"
        "  max_body_bytes: 0\n"
        "  max_header_bytes: 1MiB\n"
        "  max_connections: 10000000\n"
        "admin:\n"
        "upstream:\n"
        "  url: \"http://10.0.0.1\"\n"
        "  max_idle_per_worker: \"100000\"\n",
        "edge.yaml");
    CHECK(c->server.threads == 0);
    CHECK(c->server.max_body_bytes == 0);
    CHECK(c->server.max_header_bytes == 1048576);
    CHECK(c->server.max_connections == 10000000);
    CHECK(c->upstreams.front().max_idle_per_worker == 100000);
}

TEST_CASE("load_string errors name the given source") {
    CHECK(string_error("upstream: {url: 'http://h'}\nlog: {level: loud}\n") ==
          "inline.yaml:2:14: log.level: must be one of trace, debug, info, warn, error, off");
    CHECK(string_error("upstream: {url: 'http://h', max_idle_per_worker: 100001}\n") ==
          "inline.yaml:1:50: upstream.max_idle_per_worker: must be between 0 and 100000");
    CHECK(string_error("upstream: {url: 'http://h'}\nserver: {threads: 99999999999999999999}\n") ==
          "inline.yaml:2:19: server.threads: must be between 0 and 1024");
    CHECK(string_error("? [a, b]\n: 1\n") == "inline.yaml:1:3: (root): expected a plain key");
    CHECK(string_error("~\n") == "inline.yaml:1:1: (root): expected a mapping");
    CHECK(string_error("upstream: {url: 'http://h'}\nclients: {user: {jwt: }}\n") ==
          "inline.yaml:2:18: clients.user.jwt.algorithms: required key is missing");
    CHECK(string_error("upstream: {url: 'http://h'}\nclients: {user: {jwt: {algorithms: []}}}\n") ==
          "inline.yaml:2:36: clients.user.jwt.algorithms: must not be empty");
    CHECK(string_error("upstream: {url: 'http://h'}\n"
                       "clients: {user: {jwt: {algorithms: [RS384]}}}\n") ==
          "inline.yaml:2:37: clients.user.jwt.algorithms[0]: must be one of HS256, HS384, "
          "HS512, RS256, ES256");
    CHECK(string_error("upstream: {url: 'http://h'}\nstore: {redis: {key_prefix: ''}}\n") ==
          "inline.yaml:2:29: store.redis.key_prefix: must not be empty");
    CHECK(string_error("upstream: {url: 'http://h'}\n"
                       "store: {redis: {key_prefix: '0123456789012345678901234567890123456789"
                       "0123456789012345678901234'}}\n") ==
          "inline.yaml:2:29: store.redis.key_prefix: must be at most 64 characters");
    CHECK(string_error("upstream: {url: 'http://h'}\n"
                       "policies: {p: {ip: [{limit: 1, per: 8785h}]}}\n") ==
          "inline.yaml:2:37: policies.p.ip[0].per: must be at most 8784h (366 days)");
    CHECK(string_error("upstream: {url: 'http://h'}\n"
                       "policies: {p: {ip: [{limit: 1, per: 1h, algorithm: gcra, "
                       "burst: 8785}]}}\n") ==
          "inline.yaml:2:65: policies.p.ip[0].burst: burst * per / limit must be at most 8784h");
    CHECK(string_error("upstream: {url: 'http://h'}\n"
                       "routes: [{match: {path: /a, methods: [GET, get]}, policy: none}]\n") ==
          "inline.yaml:2:44: routes[0].match.methods[1]: listed twice");
    CHECK(string_error("upstream: {url: 'http://h'}\nroutes: [~]\n") ==
          "inline.yaml:2:9: routes[0].match: required key is missing");
}

TEST_CASE("every error fixture fails with the message on its first line") {
    const auto fixtures = error_fixtures();
    CHECK(fixtures.size() >= 20);
    for (const auto& fixture : fixtures) {
        CAPTURE(fixture.filename().string());
        CHECK(file_error(fixture.string()) == expectation_of(fixture));
    }
}

TEST_CASE("an unreadable file is reported without a position") {
    const std::string missing = fixtures_dir + "/no_such_file.yaml";
    CHECK(file_error(missing) == missing + ": cannot read: No such file or directory");
    CHECK(file_error(fixtures_dir) == fixtures_dir + ": cannot read: Is a directory");
}

TEST_CASE("the shipped conf/sluice.yaml loads") {
    auto c = cfg::load_file(std::string(SLUICE_TEST_DIR) + "/../conf/sluice.yaml");
    CHECK(c->server.listen.to_string() == "127.0.0.1:8080");
    CHECK(c->clients.trusted_proxies.size() == 2);
    CHECK(c->clients.api_key_header == "X-API-Key");
    REQUIRE(c->policies.size() == 3);
    CHECK(c->policies[0].ip.size() == 3);
    CHECK(c->policies[2].shadow);
    REQUIRE(c->routes.size() == 3);
    CHECK(c->routes[1].cost == 5);
    CHECK(c->routes[2].policy == "default");
}

TEST_CASE("routes: match.case_insensitive is a boolean, false by default") {
    auto c = cfg::load_string(
        "upstream: {url: 'http://h'}\n"
        "routes:\n"
        "  - {match: {path: /Login, case_insensitive: true}, policy: none}\n"
        "  - {match: {path: /a, case_insensitive: false}, policy: none}\n"
        "  - {match: {path_prefix: /}, policy: none}\n",
        "inline.yaml");
    REQUIRE(c->routes.size() == 3);
    CHECK(c->routes[0].case_insensitive);
    CHECK(c->routes[0].path == "/Login");  // as written; the router lower-cases it
    CHECK_FALSE(c->routes[1].case_insensitive);
    CHECK_FALSE(c->routes[2].case_insensitive);
    CHECK(string_error("upstream: {url: 'http://h'}\n"
                       "routes: [{match: {path: /a, case_insensitive: yes}, policy: none}]\n") ==
          "inline.yaml:2:47: routes[0].match.case_insensitive: expected true or false");
}

namespace {

// A directory of small files for the keys that name files (removed when the test ends).
struct temp_files {
    temp_files() {
        char tmpl[] = "/tmp/sluice-config-XXXXXX";
        dir = ::mkdtemp(tmpl);
    }
    ~temp_files() { std::filesystem::remove_all(dir); }
    std::string add(const std::string& name) {
        std::ofstream(dir + "/" + name) << "pem\n";
        return dir + "/" + name;
    }
    std::string dir;
};

}  // namespace

TEST_CASE("store.redis.tls: ca_file required, client certificate and key together, files readable") {
    temp_files t;
    const auto ca = t.add("ca.pem"), cert = t.add("client.pem"), key = t.add("client.key");
    const std::string head = "upstream: {url: 'http://h'}\nstore:\n  type: redis\n  redis:\n    tls: ";

    auto c = cfg::load_string(head + "{ca_file: '" + ca + "'}\n", "inline.yaml");
    REQUIRE(c->store.redis_tls);
    CHECK(c->store.redis_tls->ca_file == ca);
    CHECK(c->store.redis_tls->cert_file.empty());
    CHECK(c->store.redis_tls->server_name.empty());
    CHECK_FALSE(c->store.redis_sentinel);

    c = cfg::load_string(head + "{ca_file: '" + ca + "', cert_file: '" + cert + "', key_file: '" + key +
                             "', server_name: redis.internal}\n",
                         "inline.yaml");
    REQUIRE(c->store.redis_tls);
    CHECK(c->store.redis_tls->cert_file == cert);
    CHECK(c->store.redis_tls->key_file == key);
    CHECK(c->store.redis_tls->server_name == "redis.internal");

    CHECK_FALSE(cfg::load_string("upstream: {url: 'http://h'}\n", "inline.yaml")->store.redis_tls);

    CHECK(string_error(head + "{server_name: r}\n") ==
          "inline.yaml:5:10: store.redis.tls.ca_file: required key is missing");
    CHECK(
        string_error(head + "{ca_file: '" + ca + "', cert_file: '" + cert + "'}\n") ==
        "inline.yaml:5:10: store.redis.tls.key_file: required with a client certificate (give cert_file and key_file)");
    CHECK(string_error(head + "{ca_file: '" + ca + "', key_file: '" + key + "'}\n") ==
          "inline.yaml:5:10: store.redis.tls.cert_file: required with a client certificate (give cert_file and "
          "key_file)");
    CHECK(string_error(head + "{ca_file: '" + t.dir + "/none.pem'}\n") ==
          "inline.yaml:5:20: store.redis.tls.ca_file: no such file: " + t.dir + "/none.pem");
    CHECK(string_error(head + "{ca_file: '" + t.dir + "'}\n") ==
          "inline.yaml:5:20: store.redis.tls.ca_file: no such file: " + t.dir);
    CHECK(string_error(head + "{ca_file: '" + ca + "', sni: x}\n").find("store.redis.tls.sni: unknown key") !=
          std::string::npos);
    if (::geteuid() != 0) {  // root reads anything
        std::filesystem::permissions(key, std::filesystem::perms::none);
        CHECK(string_error(head + "{ca_file: '" + ca + "', cert_file: '" + cert + "', key_file: '" + key + "'}\n")
                  .find("store.redis.tls.key_file: cannot read " + key + ": Permission denied") != std::string::npos);
    }
}

TEST_CASE("upstream.tls: verified by default, files readable, a client certificate with its key") {
    temp_files t;
    const auto ca = t.add("ca.pem"), cert = t.add("client.pem"), key = t.add("client.key");
    const std::string head = "upstream:\n  url: https://10.0.0.1\n  tls: ";

    auto c = cfg::load_string("upstream: {url: 'https://h'}\n", "inline.yaml");
    CHECK(c->upstreams.front().url.tls);
    CHECK(c->upstreams.front().tls.verify);
    CHECK(c->upstreams.front().tls.ca_file.empty());
    CHECK(c->upstreams.front().tls.cert_file.empty());

    c = cfg::load_string(head + "{ca_file: '" + ca + "', cert_file: '" + cert + "', key_file: '" + key +
                             "', server_name: api.internal, verify: false}\n",
                         "inline.yaml");
    CHECK(c->upstreams.front().tls.ca_file == ca);
    CHECK(c->upstreams.front().tls.cert_file == cert);
    CHECK(c->upstreams.front().tls.key_file == key);
    CHECK(c->upstreams.front().tls.server_name == "api.internal");
    CHECK_FALSE(c->upstreams.front().tls.verify);
    // Where each file was named, for the errors only the TLS context can find.
    CHECK(c->upstreams.front().tls.ca_file_at == "inline.yaml:3:18: upstream.tls.ca_file");
    CHECK(c->upstreams.front().tls.cert_file_at.find("inline.yaml:3:") == 0);
    CHECK(c->upstreams.front().tls.key_file_at.ends_with(": upstream.tls.key_file"));

    CHECK(string_error(head + "{cert_file: '" + cert + "'}\n") ==
          "inline.yaml:3:8: upstream.tls.key_file: required with a client certificate (give cert_file and key_file)");
    CHECK(string_error(head + "{key_file: '" + key + "'}\n") ==
          "inline.yaml:3:8: upstream.tls.cert_file: required with a client certificate (give cert_file and key_file)");
    CHECK(string_error(head + "{ca_file: '" + t.dir + "'}\n") ==
          "inline.yaml:3:18: upstream.tls.ca_file: no such file: " + t.dir);
    CHECK(string_error(head + "{sni: x}\n").find("upstream.tls.sni: unknown key") != std::string::npos);
    CHECK(string_error("upstream:\n  tls: {verify: false}\n  url: http://h\n") ==
          "inline.yaml:2:3: upstream.tls: applies to an https:// upstream url only");
}

TEST_CASE("store.redis.sentinel: master and sentinels, not together with nodes") {
    const std::string head = "upstream: {url: 'http://h'}\nstore:\n  type: redis\n  redis:\n";
    auto c = cfg::load_string(head + "    sentinel: {master: mymaster, nodes: ['10.0.0.1:26379', 's2:26380']}\n",
                              "inline.yaml");
    REQUIRE(c->store.redis_sentinel);
    CHECK(c->store.redis_sentinel->master == "mymaster");
    REQUIRE(c->store.redis_sentinel->nodes.size() == 2);
    CHECK(c->store.redis_sentinel->nodes[0] == cfg::host_port{"10.0.0.1", 26379});
    CHECK(c->store.redis_sentinel->nodes[1] == cfg::host_port{"s2", 26380});

    CHECK(string_error(head + "    sentinel: {nodes: ['s:26379']}\n") ==
          "inline.yaml:5:15: store.redis.sentinel.master: required key is missing");
    CHECK(string_error(head + "    sentinel: {master: m}\n") ==
          "inline.yaml:5:15: store.redis.sentinel.nodes: required key is missing");
    CHECK(string_error(head + "    sentinel: {master: m, nodes: []}\n") ==
          "inline.yaml:5:34: store.redis.sentinel.nodes: must not be empty");
    CHECK(string_error(head + "    sentinel: {master: m, nodes: ['s']}\n") ==
          "inline.yaml:5:35: store.redis.sentinel.nodes[0]: expected host:port like \"redis:6379\" or \"[::1]:6379\"");
    CHECK(string_error(head + "    nodes: ['r:6379']\n    sentinel: {master: m, nodes: ['s:26379']}\n") ==
          "inline.yaml:6:5: store.redis.sentinel: give either nodes or sentinel, not both (with sentinel, the "
          "sentinels name the primary)");
}
