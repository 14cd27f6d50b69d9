// Rate limits on the memory store, through the real gateway binary.
#include "e2e.hpp"

#include <boost/json/parse.hpp>

#include <atomic>
#include <regex>
#include <thread>

using namespace sluice::test;

namespace {

struct limited_fixture {
    explicit limited_fixture(const std::string& extra, const yaml_overrides& overrides = {}, env_list env = {}) {
        up = start_upstream();
        gw = start_gateway(gateway_yaml(up->port, overrides, extra), {}, std::move(env));
    }
    response get(const std::string& target, header_list headers = {}) const {
        return fetch(gw->port, "GET", target, std::move(headers));
    }
    std::string metrics() const { return fetch(gw->admin_port, "GET", "/metrics").body; }
    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;
};

}  // namespace

TEST_CASE("a concurrent burst on many connections admits exactly the limit") {
    limited_fixture f(R"(
policies:
  burst:
    ip: [ {limit: 25, per: 1h, precision: 6m} ]
routes:
  - { match: { path_prefix: / }, policy: burst }
)");
    constexpr int connections = 40, per_connection = 5;
    std::atomic<int> ok{0}, limited{0}, other{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < connections; ++i)
        clients.emplace_back([&] {
            try {
                connection c("127.0.0.1", f.gw->port);
                for (int j = 0; j < per_connection; ++j) {
                    c.send(make_request("GET", "/burst"));
                    auto r = c.read_response();
                    (r.status == 200 ? ok : r.status == 429 ? limited : other)++;
                }
            } catch (const std::exception&) {
                other++;
            }
        });
    for (auto& t : clients) t.join();
    CHECK(ok == 25);
    CHECK(limited == connections * per_connection - 25);
    CHECK(other == 0);
    auto m = f.metrics();
    CHECK(metric_value(m, R"(sluice_rate_limit_decisions_total{policy="burst",result="allowed",listener="proxy"})") ==
          25);
    CHECK(metric_value(m, R"(sluice_rate_limit_decisions_total{policy="burst",result="limited",listener="proxy"})") ==
          175);
    CHECK(metric_value(m, "sluice_store_keys") == 1);
}

TEST_CASE("429: status, Retry-After, IETF fields and JSON body") {
    limited_fixture f(R"(
policies:
  tight:
    ip: [ {limit: 2, per: 1h, precision: 6m}, {limit: 100, per: 1m, algorithm: fixed} ]
routes:
  - { match: { path_prefix: / }, policy: tight }
)");
    auto first = f.get("/a");
    CHECK(first.status == 200);
    CHECK(first.header("RateLimit-Policy") == R"("ip-1h";q=2;w=3600, "ip-1m";q=100;w=60)");
    CHECK(first.header("RateLimit").rfind(R"("ip-1h";r=1;t=)", 0) == 0);
    CHECK(f.get("/b").status == 200);
    auto r = f.get("/c");
    REQUIRE(r.status == 429);
    CHECK(r.header("Content-Type") == "application/json");
    auto retry = std::stoll(r.header("Retry-After"));
    CHECK(retry > 3000);  // the 1h window's oldest bucket leaves at most 60 min later
    CHECK(retry <= 3600);
    auto body = json_of(r);
    CHECK(body.at("error").as_string() == "rate_limited");
    CHECK(body.at("policy").as_string() == "tight");
    CHECK(body.at("retry_after").to_number<std::int64_t>() == retry);
    std::smatch m;
    auto field = r.header("RateLimit");
    REQUIRE(std::regex_match(field, m, std::regex(R"re("ip-1h";r=0;t=(\d+), "ip-1m";r=\d+;t=\d+)re")));
    CHECK(std::stoll(m[1]) <= retry);
}

TEST_CASE(
    "min_interval: Retry-After is the wait for the interval, not the window's reset, and RateLimit lists each tier") {
    limited_fixture f(R"(
policies:
  spaced:
    ip: [ {limit: 100, per: 1m, min_interval: 1500ms}, {limit: 2, per: 250ms, algorithm: fixed} ]
routes:
  - { match: { path_prefix: / }, policy: spaced }
)");
    auto first = f.get("/a");
    REQUIRE(first.status == 200);
    // 250ms is no whole second: stated as the 8 per second it allows.
    CHECK(first.header("RateLimit-Policy") == R"("ip-1m";q=100;w=60, "ip-250ms";q=8;w=1)");
    auto r = f.get("/b");
    REQUIRE(r.status == 429);
    const auto retry = std::stoll(r.header("Retry-After"));
    CHECK(retry >= 1);
    CHECK(retry <= 2);  // 1.5 s after the first admission, rounded up (it said 57)
    CHECK(json_of(r).at("retry_after").to_number<std::int64_t>() == retry);
    // One item per tier, the refusing one first: the minute's t is still there to read.
    std::smatch m;
    const auto field = r.header("RateLimit");
    REQUIRE(std::regex_match(field, m, std::regex(R"re("ip-1m";r=99;t=(\d+), "ip-250ms";r=(\d);t=(\d))re")));
    CHECK(std::stoll(m[1]) > 50);
}

TEST_CASE("legacy rate-limit fields") {
    limited_fixture f(R"(
policies:
  p:
    ip: [ {limit: 3, per: 1m, algorithm: fixed} ]
routes:
  - { match: { path_prefix: / }, policy: p }
)",
                      {{"response.headers", "legacy"}});
    auto r = f.get("/");
    CHECK(r.header("X-RateLimit-Limit") == "3");
    CHECK(r.header("X-RateLimit-Remaining") == "2");
    CHECK(!r.header("X-RateLimit-Reset").empty());
    CHECK_FALSE(r.has_header("RateLimit"));
}

TEST_CASE("shadow policies count but never reject, and stay invisible to clients") {
    limited_fixture f(R"(
policies:
  trial:
    shadow: true
    ip: [ {limit: 1, per: 1h, precision: 6m} ]
routes:
  - { match: { path_prefix: / }, policy: trial }
)");
    for (int i = 0; i < 3; ++i) {
        auto r = f.get("/");
        CHECK(r.status == 200);
        CHECK_FALSE(r.has_header("RateLimit"));
    }
    auto m = f.metrics();
    CHECK(metric_value(m, R"(sluice_rate_limit_decisions_total{policy="trial",result="allowed",listener="proxy"})") ==
          1);
    CHECK(metric_value(
              m, R"(sluice_rate_limit_decisions_total{policy="trial",result="shadow_limited",listener="proxy"})") == 2);
}

TEST_CASE("the allow-list bypasses every limit") {
    limited_fixture f(R"(
clients:
  allow: ["127.0.0.0/8"]
policies:
  p:
    ip: [ {limit: 1, per: 1h, precision: 6m} ]
routes:
  - { match: { path_prefix: / }, policy: p }
)");
    for (int i = 0; i < 4; ++i) CHECK(f.get("/").status == 200);
}

TEST_CASE("X-Forwarded-For is believed from trusted proxies only") {
    const std::string limits = R"(
policies:
  p:
    ip: [ {limit: 1, per: 1h, precision: 6m} ]
routes:
  - { match: { path_prefix: / }, policy: p }
)";
    SUBCASE("behind a trusted proxy each client has its own budget") {
        limited_fixture f("clients:\n  trusted_proxies: [\"127.0.0.1/32\"]\n" + limits);
        CHECK(f.get("/", {{"X-Forwarded-For", "198.51.100.1"}}).status == 200);
        CHECK(f.get("/", {{"X-Forwarded-For", "198.51.100.2"}}).status == 200);
        CHECK(f.get("/", {{"X-Forwarded-For", "198.51.100.1"}}).status == 429);
        // Prepending a fake hop does not help: the rightmost untrusted entry counts.
        CHECK(f.get("/", {{"X-Forwarded-For", "203.0.113.9, 198.51.100.2"}}).status == 429);
    }
    SUBCASE("from an untrusted peer the header is ignored") {
        limited_fixture f(limits);
        CHECK(f.get("/", {{"X-Forwarded-For", "198.51.100.1"}}).status == 200);
        CHECK(f.get("/", {{"X-Forwarded-For", "198.51.100.2"}}).status == 429);
    }
}

TEST_CASE("routes: first match wins, methods, cost and unlimited routes") {
    limited_fixture f(R"(
policies:
  p:
    ip: [ {limit: 10, per: 1h, precision: 6m} ]
routes:
  - { match: { path: /free }, policy: none }
  - { match: { path_prefix: /heavy, methods: [POST] }, policy: p, cost: 5 }
  - { match: { path_prefix: / }, policy: p }
)");
    for (int i = 0; i < 12; ++i) CHECK(f.get("/free").status == 200);
    CHECK(fetch(f.gw->port, "POST", "/heavy", {}, "x").status == 200);  // 5 of 10
    auto light = f.get("/heavy");                                       // GET: the catch-all, cost 1
    CHECK(light.status == 200);
    CHECK(light.header("RateLimit").rfind(R"("ip-1h";r=4;)", 0) == 0);
    auto heavy = fetch(f.gw->port, "POST", "/heavy", {}, "x");  // needs 5, has 4
    CHECK(heavy.status == 429);
    CHECK(f.get("/light").status == 200);
    CHECK(eventually_metric(f.gw->admin_port, R"(sluice_requests_total{route="/free",status="2xx"})", 12) == 12);
    CHECK(eventually_metric(f.gw->admin_port, R"(sluice_requests_total{route="/heavy*",status="4xx"})", 1) == 1);
}

TEST_CASE("users: API keys and JWT subjects have budgets of their own, a bad token gets 401") {
    const std::string secret = "e2e-secret-for-tests";
    limited_fixture f(R"(
clients:
  user:
    api_key_header: X-API-Key
    jwt: { algorithms: [HS256], secret_env: SLUICE_E2E_JWT }
policies:
  p:
    ip: [ {limit: 100, per: 1h, precision: 6m} ]
    user: [ {limit: 2, per: 1h, precision: 6m} ]
routes:
  - { match: { path_prefix: / }, policy: p }
)",
                      {}, {{"SLUICE_E2E_JWT", secret}});
    for (int i = 0; i < 2; ++i) CHECK(f.get("/", {{"X-API-Key", "key-a"}}).status == 200);
    CHECK(f.get("/", {{"X-API-Key", "key-a"}}).status == 429);
    CHECK(f.get("/", {{"X-API-Key", "key-b"}}).status == 200);

    auto alice = hs256_token(secret, "alice", 600);
    for (int i = 0; i < 2; ++i) CHECK(f.get("/", {{"Authorization", "Bearer " + alice}}).status == 200);
    CHECK(f.get("/", {{"Authorization", "Bearer " + alice}}).status == 429);
    CHECK(f.get("/", {{"Authorization", "Bearer " + hs256_token(secret, "bob", 600)}}).status == 200);

    auto expired = f.get("/", {{"Authorization", "Bearer " + hs256_token(secret, "carol", -3600)}});
    CHECK(expired.status == 401);
    CHECK(json_of(expired).at("error").as_string() == "unauthorized");
    auto forged = f.get("/", {{"Authorization", "Bearer " + hs256_token("not-the-secret", "alice", 600)}});
    CHECK(forged.status == 401);
    CHECK(metric_value(f.metrics(), "sluice_unauthorized_total") == 2);
}

namespace {

// GET /top's entries as (identity, refusals), most first.
std::vector<std::pair<std::string, std::int64_t>> top_of(const std::string& body) {
    std::vector<std::pair<std::string, std::int64_t>> out;
    const auto doc = boost::json::parse(body);
    for (const auto& e : doc.at("offenders").as_array()) {
        out.emplace_back(std::string(e.at("identity").as_string()), e.at("refusals").to_number<std::int64_t>());
    }
    return out;
}

// Three clients behind a trusted proxy refused 5, 2 and 0 times; then the same of one user.
void check_top(limited_fixture& f) {
    const auto as = [](const char* ip) { return header_list{{"X-Forwarded-For", ip}}; };
    for (int i = 0; i < 6; ++i) f.get("/", as("198.51.100.1"));
    for (int i = 0; i < 3; ++i) f.get("/", as("198.51.100.2"));
    CHECK(f.get("/", as("198.51.100.3")).status == 200);
    auto r = fetch(f.gw->admin_port, "GET", "/top?n=5");
    REQUIRE(r.status == 200);
    using entries = std::vector<std::pair<std::string, std::int64_t>>;
    CHECK(top_of(r.body) == entries{{"198.51.100.1", 5}, {"198.51.100.2", 2}});
    const auto doc = boost::json::parse(r.body).as_object();
    CHECK(doc.at("window_seconds").to_number<int>() == 60);
    const auto& first = doc.at("offenders").as_array().at(0).as_object();
    CHECK(first.at("kind").as_string() == "ip");
    CHECK(first.at("policy").as_string() == "p");
    CHECK(std::regex_match(std::string(first.at("id").as_string()), std::regex("[0-9a-f]{32}")));
    CHECK(top_of(fetch(f.gw->admin_port, "GET", "/top?n=1").body) == entries{{"198.51.100.1", 5}});
    CHECK(metric_value(f.metrics(), "sluice_limited_identities") == 2);

    // A user named by an API key (the user is named when both of its tiers refuse): the key
    // is a credential, only its last four characters show.
    for (int i = 0; i < 4; ++i)
        f.get("/", {{"X-API-Key", "customer-secret-9f3a"}, {"X-Forwarded-For", "198.51.100.4"}});
    r = fetch(f.gw->admin_port, "GET", "/top");
    CHECK(r.body.find("customer-secret") == std::string::npos);
    CHECK(top_of(r.body) == entries{{"198.51.100.1", 5}, {"key:…9f3a", 3}, {"198.51.100.2", 2}});

    for (const char* bad : {"/top?n=0", "/top?n=1001", "/top?n=x", "/top?m=3", "/top?n=2&n="}) {
        auto b = fetch(f.gw->admin_port, "GET", bad);
        CHECK_MESSAGE(b.status == 400, bad);
        CHECK(boost::json::parse(b.body).at("error").as_string() == "bad_request");
    }
}

}  // namespace

// A policy of one request per hour per address and per user, behind a trusted proxy.
std::string top_yaml(const std::string& store = "") {
    return store + R"(
clients:
  trusted_proxies: ["127.0.0.1/32"]
  user: { api_key_header: X-API-Key }
policies:
  p:
    ip: [ {limit: 1, per: 1h, precision: 6m} ]
    user: [ {limit: 1, per: 1h, precision: 6m} ]
routes:
  - { match: { path_prefix: / }, policy: p }
)";
}

TEST_CASE("GET /top: the identities refused most in the last minute, on the memory store") {
    limited_fixture f(top_yaml());
    check_top(f);
}

TEST_CASE("GET /top: the same on the Redis store (refusals from Redis and from the deny cache)") {
    redis_server redis(unused_port());
    limited_fixture f(top_yaml("store:\n  type: redis\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis.port) +
                               "\"], timeout: 2s }"));
    REQUIRE(eventually([&] { return fetch(f.gw->admin_port, "GET", "/readyz").status == 200; }));
    check_top(f);
}

TEST_CASE("API key registry: keys of one user share its budget, unknown and missing keys get 401, reload re-reads") {
    const auto dir = make_temp_dir();
    const std::string keys = dir + "/keys.yaml";
    const std::string registry = read_file(std::string(SLUICE_TEST_DIR) + "/config/fixtures/keys/good.keys.yaml");
    write_file(keys, registry);
    limited_fixture f(R"(
clients:
  user:
    api_key_header: X-API-Key
    api_keys: { file: ")" +
                      keys + R"(", require_known: true }
plans:
  pro: { user: [ {limit: 1000, per: 1d, algorithm: fixed} ] }
policies:
  p:
    user: [ {limit: 3, per: 1h, precision: 6m} ]
routes:
  - { match: { path: /health }, policy: none }
  - { match: { path_prefix: / }, policy: p }
)");
    const auto with_key = [](const char* k) { return header_list{{"X-API-Key", k}}; };
    CHECK(f.get("/", with_key("acme-key-one-0001")).status == 200);
    CHECK(f.get("/", with_key("acme-key-one-0001")).status == 200);
    CHECK(f.get("/", with_key("acme-key-two-0002")).status == 200);
    CHECK(f.get("/", with_key("acme-key-two-0002")).status == 429);  // acme's third of 3 went to the other key
    CHECK(f.get("/", with_key("globex-key-0003")).status == 200);

    auto unknown = f.get("/", with_key("acme-key-one-0009"));
    CHECK(unknown.status == 401);
    CHECK(boost::json::parse(unknown.body).at("error").as_string() == "unauthorized");
    CHECK(unknown.body.find("unknown API key") != std::string::npos);
    auto missing = f.get("/");
    CHECK(missing.status == 401);
    CHECK(missing.body.find("an API key is required") != std::string::npos);
    CHECK(f.get("/health").status == 200);  // a route without a policy stays open

    auto top = boost::json::parse(fetch(f.gw->admin_port, "GET", "/top").body);
    CHECK(top.at("offenders").as_array().at(0).at("identity").as_string() == "user:acme");

    // A new key for globex, then a reload: the file is read again.
    CHECK(f.get("/", with_key("globex-key-0004")).status == 401);
    write_file(keys, registry + "- { sha256: " + sha256_hex("globex-key-0004") + ", user: globex }\n");
    CHECK(fetch(f.gw->admin_port, "POST", "/reload").status == 200);
    CHECK(f.get("/", with_key("globex-key-0004")).status == 200);
    write_file(keys, "- { sha256: nothex, user: globex }\n");
    auto bad = fetch(f.gw->admin_port, "POST", "/reload");
    CHECK(bad.status == 422);
    CHECK(bad.body.find("keys.yaml:1:13") != std::string::npos);
    CHECK(f.get("/", with_key("globex-key-0004")).status == 200);  // the running registry stays
    write_file(keys, "");                                          // cut short: it would refuse every key
    bad = fetch(f.gw->admin_port, "POST", "/reload");
    CHECK(bad.status == 422);
    CHECK(bad.body.find("has no keys while the running one has 4") != std::string::npos);
    CHECK(f.get("/", with_key("globex-key-0004")).status == 429);  // still known (not 401), and over globex's 3
}
