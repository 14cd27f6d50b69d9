// The HTTP check (service.http_listen) through the real binary: 200s then 429 at exactly the
// limit with Retry-After and the rate-limit fields, nothing sent upstream; X-Original-URI and
// -Method choose the route and its policy; the client address from X-Forwarded-For or
// X-Real-IP, believed only from service.http_peers and walked through
// clients.trusted_proxies; one limit counted across the proxy path and /check, on the memory
// store and on one real Redis shared by two gateways; the access log line and the metrics.
#include "e2e.hpp"

using namespace sluice::test;
using namespace std::string_literals;

namespace {

std::uint16_t check_port_of(const gateway& gw) {
    const auto m = gw.proc->wait_for_line(R"(check listening on 127\.0\.0\.1:([0-9]+))");
    return static_cast<std::uint16_t>(std::stoi(m[1]));
}

// A gateway with the check on a port of its own; `extra` adds sections (policies, routes...).
struct check_fixture {
    explicit check_fixture(const std::string& extra, yaml_overrides o = {}, env_list env = {}) {
        up = start_upstream();
        o.emplace_back("service.http_listen", "\"127.0.0.1:0\"");
        gw = start_gateway(gateway_yaml(up->port, o, extra), {}, std::move(env));
        port = check_port_of(*gw);
    }
    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;
    std::uint16_t port = 0;

    response check(const std::string& uri, const std::string& client, header_list extra = {},
                   const std::string& method = "GET", const std::string& body = "") const {
        header_list h{{"X-Original-URI", uri}, {"X-Forwarded-For", client}};
        h.insert(h.end(), extra.begin(), extra.end());
        return fetch(port, method, "/check", std::move(h), body);
    }
    std::int64_t upstream_requests() const {
        return boost::json::parse(fetch(up->port, "GET", "/stats").body)
            .as_object()
            .at("requests")
            .to_number<std::int64_t>();
    }
    std::string metrics() const { return fetch(gw->admin_port, "GET", "/metrics").body; }
};

const std::string limited_api = R"(
policies:
  p: { ip: [ {limit: 3, per: 1h, algorithm: log} ] }
  login: { ip: [ {limit: 1, per: 1h, algorithm: log} ] }
routes:
  - { match: { path: /login, methods: [POST] }, policy: login }
  - { match: { path_prefix: /api }, policy: p }
  - { match: { path_prefix: /free }, policy: none }
)";

}  // namespace

TEST_CASE("check: 200s then 429 at exactly the limit, with Retry-After and the fields, and nothing goes upstream") {
    check_fixture f(limited_api);
    for (int i = 0; i < 3; ++i) {
        const auto r = f.check("/api/items?x=1", "203.0.113.5");
        CAPTURE(i);
        REQUIRE(r.status == 200);
        CHECK(r.body.empty());
        CHECK(r.header("RateLimit-Policy") == R"("ip-1h";q=3;w=3600)");
        CHECK(r.header("RateLimit").rfind(R"("ip-1h";r=)" + std::to_string(2 - i) + ";t=", 0) == 0);
        CHECK_FALSE(r.has_header("Retry-After"));
    }
    const auto refused = f.check("/api/other", "203.0.113.5");
    REQUIRE(refused.status == 429);
    CHECK(refused.header("RateLimit-Policy") == R"("ip-1h";q=3;w=3600)");
    CHECK(refused.header("RateLimit").rfind(R"("ip-1h";r=0;t=)", 0) == 0);
    const auto retry = std::stoll(refused.header("Retry-After"));
    CHECK(retry > 3500);  // the oldest of the 3 admissions leaves the log an hour after it came
    CHECK(retry <= 3600);
    CHECK(json_of(refused).at("error").as_string() == "rate_limited");
    CHECK(json_of(refused).at("policy").as_string() == "p");

    // Another client has its own count; a route without a policy is never limited.
    CHECK(f.check("/api/items", "203.0.113.6").status == 200);
    for (int i = 0; i < 5; ++i) {
        const auto free = f.check("/free/x", "203.0.113.5");
        CHECK(free.status == 200);
        CHECK_FALSE(free.has_header("RateLimit"));
    }
    CHECK(f.upstream_requests() == 0);

    const auto m = f.metrics();
    CHECK(metric_value(m, R"(sluice_rate_limit_decisions_total{policy="p",result="allowed",listener="check"})") == 4);
    CHECK(metric_value(m, R"(sluice_rate_limit_decisions_total{policy="p",result="limited",listener="check"})") == 1);
    CHECK(metric_value(m, R"(sluice_rate_limit_decisions_total{policy="p",result="allowed",listener="proxy"})") == 0);
    CHECK(metric_value(m, "sluice_requests_total{route=\"(check)\",status=\"2xx\"}") == 9);
    CHECK(metric_value(m, "sluice_requests_total{route=\"(check)\",status=\"4xx\"}") == 1);
}

TEST_CASE("check: X-Original-URI and X-Original-Method choose the route and its policy") {
    check_fixture f(limited_api);
    // POST /login is the login policy's (1 an hour); GET /login matches no route: not limited.
    CHECK(f.check("/login", "198.51.100.1", {{"X-Original-Method", "POST"}}).status == 200);
    const auto second = f.check("/login", "198.51.100.1", {{"X-Original-Method", "POST"}});
    CHECK(second.status == 429);
    CHECK(json_of(second).at("policy").as_string() == "login");
    CHECK(f.check("/login", "198.51.100.1").status == 200);
    // Traefik's names for the same fields.
    CHECK(fetch(f.port, "GET", "/check",
                {{"X-Forwarded-Uri", "/login"}, {"X-Forwarded-Method", "POST"}, {"X-Forwarded-For", "198.51.100.1"}})
              .status == 429);
    // The login policy counted nothing for /api: its own 3.
    for (int i = 0; i < 3; ++i) CHECK(f.check("/api/x", "198.51.100.1").status == 200);
    CHECK(f.check("/api/x", "198.51.100.1").status == 429);
    // The normalised path is matched: /free/../api is /api.
    CHECK(f.check("/free/../api/y", "198.51.100.1").status == 429);
}

TEST_CASE("check: a POST body is read and dropped, bad checks get a JSON reason, the access log marks checks") {
    auto dir = make_temp_dir();
    const std::string log_path = dir + "/access.log";
    check_fixture f(limited_api, {{"log.access.path", "\"" + log_path + "\""}, {"server.max_body_bytes", "1KiB"}});
    connection c("127.0.0.1", f.port);
    c.send(make_request("POST", "/check", {{"X-Original-URI", "/api/a"}, {"X-Forwarded-For", "192.0.2.9"}},
                        std::string(600, 'b')));
    CHECK(c.read_response().status == 200);
    // The same connection serves the next check: the body was read whole.
    c.send(make_request("GET", "/check", {{"X-Original-URI", "/api/b"}, {"X-Forwarded-For", "192.0.2.9"}}));
    const auto next = c.read_response();
    CHECK(next.status == 200);
    CHECK(next.header("RateLimit").rfind(R"("ip-1h";r=1;t=)", 0) == 0);
    CHECK(f.check("/api/a", "192.0.2.9", {}, "POST", std::string(2000, 'b')).status == 413);

    const auto reason = [](const response& r) { return std::string(json_of(r).at("message").as_string()); };
    const auto no_uri = fetch(f.port, "GET", "/check", {{"X-Forwarded-For", "192.0.2.9"}});
    CHECK(no_uri.status == 400);
    CHECK(reason(no_uri) == "the check needs the original request's URI: X-Original-URI or X-Forwarded-Uri");
    const auto no_client = fetch(f.port, "GET", "/check", {{"X-Original-URI", "/api/a"}});
    CHECK(no_client.status == 400);
    CHECK(reason(no_client) ==
          "the check needs the client's address: X-Forwarded-For or X-Real-IP, a valid IP address");
    CHECK(f.check("/api/a", "not-an-address").status == 400);
    CHECK(f.check("/api/a", "192.0.2.9", {{"X-Original-URI", "/free"}}).status == 400);  // given twice
    // Both names, different values: a client behind nginx sending Traefik's name picks nothing.
    const auto disagree = f.check("/api/a", "192.0.2.9", {{"X-Forwarded-Uri", "/free"}});
    CHECK(disagree.status == 400);
    CHECK(reason(disagree) ==
          "a field that describes the original request is given twice, or differently by its two names");
    CHECK(f.check("/api/a", "192.0.2.9", {{"X-Forwarded-Method", "POST"}, {"X-Original-Method", "GET"}}).status == 400);
    CHECK(f.check("/api/a", "192.0.2.9", {{"X-Forwarded-Uri", "/api/a"}}).status == 200);  // the same: agreed
    CHECK(f.check("/api/a", "192.0.2.9", {{"X-Original-Method", "post"}}).status == 400);
    CHECK(f.check("api/a", "192.0.2.9").status == 400);
    CHECK(fetch(f.port, "GET", "/other", {{"X-Original-URI", "/api/a"}, {"X-Forwarded-For", "192.0.2.9"}}).status ==
          404);
    const auto put = f.check("/api/a", "192.0.2.9", {}, "PUT");
    CHECK(put.status == 405);
    CHECK(put.header("Allow") == "GET, POST");
    CHECK(f.upstream_requests() == 0);

    std::vector<boost::json::object> lines;
    const bool logged = eventually([&] {
        lines.clear();
        std::istringstream in(read_file(log_path));
        for (std::string line; std::getline(in, line);)
            if (!line.empty() && line.back() == '}') lines.push_back(boost::json::parse(line).as_object());
        return lines.size() >= 14;
    });
    REQUIRE(logged);
    int admitted = 0;
    for (const auto& l : lines) {
        CHECK(l.at("check").as_bool());
        CHECK(l.at("peer").as_string() == "127.0.0.1");
        if (l.at("status").to_number<int>() != 200) continue;
        ++admitted;
        CHECK(l.at("client").as_string() == "192.0.2.9");
        CHECK(l.at("route").as_string() == "/api*");
        CHECK(l.at("policy").as_string() == "p");
        CHECK(l.at("decision").as_string() == "allowed");
        CHECK(l.at("path").as_string().starts_with("/api/"));
    }
    CHECK(admitted == 3);
}

TEST_CASE("check: the client address comes from X-Forwarded-For only from service.http_peers") {
    check_fixture f(limited_api,
                    {{"service.http_peers", "[\"127.0.0.2\"]"}, {"clients.trusted_proxies", "[\"10.0.0.0/8\"]"}});
    // A peer outside http_peers may not ask at all: it could name any address and URI.
    const auto outsider = f.check("/api/a", "192.0.2.1");
    CHECK(outsider.status == 403);
    CHECK(json_of(outsider).at("message").as_string() == "this address may not ask the check (service.http_peers)");

    const auto ask = [&](header_list h) {
        h.emplace_back("X-Original-URI", "/api/a");
        connection c("127.0.0.1", f.port, 10s, "127.0.0.2");
        c.send(make_request("GET", "/check", h));
        return c.read_response();
    };
    // From the right: 10.0.0.9 is a trusted proxy, 198.51.100.7 the client. Entries a client
    // put further left change nothing.
    for (int i = 0; i < 3; ++i) CHECK(ask({{"X-Forwarded-For", "198.51.100.7, 10.0.0.9"}}).status == 200);
    CHECK(ask({{"X-Forwarded-For", "198.51.100.7"}}).status == 429);
    CHECK(ask({{"X-Forwarded-For", "203.0.113.1, 198.51.100.7"}}).status == 429);
    CHECK(ask({{"X-Forwarded-For", "203.0.113.1"}, {"X-Forwarded-For", "198.51.100.7"}}).status == 429);
    // X-Real-IP when no X-Forwarded-For is sent.
    CHECK(ask({{"X-Real-IP", "198.51.100.7"}}).status == 429);
    CHECK(ask({{"X-Real-IP", "198.51.100.8"}}).status == 200);
    // The nearest entry malformed: no address, 400 (not the proxy's own address).
    CHECK(ask({{"X-Forwarded-For", "198.51.100.9, garbage"}}).status == 400);
}

TEST_CASE("check: one limit counted across the proxy path and /check, on the memory store") {
    check_fixture f(limited_api);
    // The proxy sees the client 127.0.0.1 (its peer); the check is told the same address.
    CHECK(fetch(f.gw->port, "GET", "/api/1").status == 200);
    CHECK(f.check("/api/2", "127.0.0.1").status == 200);
    CHECK(fetch(f.gw->port, "GET", "/api/3").status == 200);
    CHECK(f.check("/api/4", "127.0.0.1").status == 429);
    CHECK(fetch(f.gw->port, "GET", "/api/5").status == 429);
    CHECK(f.upstream_requests() == 2);
}

TEST_CASE("check: one limit counted across the proxy path of one gateway and /check of another, on one Redis") {
    redis_server redis(unused_port());
    const std::string store =
        "{ type: redis, on_error: deny, redis: { nodes: [\"127.0.0.1:" + std::to_string(redis.port) + "\"] } }";
    check_fixture checker(limited_api, {{"store", store}});
    auto up = start_upstream();
    auto proxy = start_gateway(gateway_yaml(up->port, {{"store", store}}, limited_api));
    CHECK(checker.check("/api/1", "127.0.0.1").status == 200);
    CHECK(fetch(proxy->port, "GET", "/api/2").status == 200);
    CHECK(checker.check("/api/3", "127.0.0.1").status == 200);
    const auto refused = fetch(proxy->port, "GET", "/api/4");
    CHECK(refused.status == 429);
    const auto checked = checker.check("/api/5", "127.0.0.1");
    CHECK(checked.status == 429);
    // The same instant of release on both paths (the first admission's hour), to the second.
    const auto a = std::stoll(refused.header("Retry-After")), b = std::stoll(checked.header("Retry-After"));
    CHECK(std::abs(a - b) <= 1);
    CHECK(boost::json::parse(fetch(up->port, "GET", "/stats").body).as_object().at("requests").to_number<int>() == 1);
}

TEST_CASE(
    "check: the original's credentials and fields identify the caller, shadow, concurrency and /top as on the "
    "gateway") {
    const std::string secret = "e2e-secret-for-check";
    check_fixture f(R"(
clients:
  user:
    api_key_header: X-API-Key
    jwt: { algorithms: [HS256], secret_env: SLUICE_E2E_JWT }
policies:
  p:
    ip: [ {limit: 100, per: 1h, algorithm: log} ]
    user: [ {limit: 2, per: 1h, algorithm: log} ]
  tenant:
    header:X-Tenant: [ {limit: 1, per: 1h, algorithm: log} ]
    on_missing: { header:X-Tenant: refuse }
  trial: { shadow: true, ip: [ {limit: 1, per: 1h, algorithm: log} ] }
  inflight: { ip: [ {concurrency: 1, lease: 3s} ] }
routes:
  - { match: { path_prefix: /users }, policy: p }
  - { match: { path_prefix: /tenants }, policy: tenant }
  - { match: { path_prefix: /trial }, policy: trial }
  - { match: { path_prefix: /slots }, policy: inflight }
)",
                    {}, {{"SLUICE_E2E_JWT", secret}});
    // The user named by the original's API key or JWT, whatever the address.
    CHECK(f.check("/users/1", "192.0.2.1", {{"X-API-Key", "key-a"}}).status == 200);
    CHECK(f.check("/users/2", "192.0.2.2", {{"X-API-Key", "key-a"}}).status == 200);
    const auto user_refused = f.check("/users/3", "192.0.2.3", {{"X-API-Key", "key-a"}});
    CHECK(user_refused.status == 429);
    CHECK(user_refused.header("RateLimit-Policy").find(R"("user-1h";q=2;w=3600)") != std::string::npos);
    CHECK(f.check("/users/4", "192.0.2.3", {{"X-API-Key", "key-b"}}).status == 200);
    const auto expired =
        f.check("/users/5", "192.0.2.3", {{"Authorization", "Bearer " + hs256_token(secret, "carol", -3600)}});
    CHECK(expired.status == 401);
    CHECK(json_of(expired).at("error").as_string() == "unauthorized");

    // header: kinds read from the original's fields; a missing one the policy refuses is a 400.
    CHECK(f.check("/tenants/x", "192.0.2.1", {{"X-Tenant", "acme"}}).status == 200);
    CHECK(f.check("/tenants/x", "192.0.2.2", {{"X-Tenant", "acme"}}).status == 429);
    const auto missing = f.check("/tenants/x", "192.0.2.1");
    CHECK(missing.status == 400);
    CHECK(json_of(missing).at("error").as_string() == "missing_identifier");

    // A shadow policy admits and says nothing, as the gateway does; counted shadow_limited.
    for (int i = 0; i < 3; ++i) {
        const auto r = f.check("/trial", "192.0.2.9");
        CHECK(r.status == 200);
        CHECK_FALSE(r.has_header("RateLimit"));
    }
    CHECK(metric_value(
              f.metrics(),
              R"(sluice_rate_limit_decisions_total{policy="trial",result="shadow_limited",listener="check"})") == 2);

    // A concurrency slot is held until the check's answer is written: one check after another
    // each finds the slot free again.
    for (int i = 0; i < 3; ++i) {
        REQUIRE(eventually([&] { return metric_value(f.metrics(), "sluice_concurrency_slots_held") == 0; }));
        CHECK(f.check("/slots", "192.0.2.9").status == 200);
    }

    // Who the checks refused is in /top, as on the gateway path.
    const auto top = fetch(f.gw->admin_port, "GET", "/top").body;
    CHECK(top.find("tenant") != std::string::npos);
    CHECK(f.upstream_requests() == 0);
}

TEST_CASE("check: a reload applies service.http_peers at once, service.http_listen needs a restart") {
    check_fixture f(limited_api);
    CHECK(f.check("/api/a", "192.0.2.1").status == 200);
    // Only 127.0.0.2 may ask now; the listener stays where it is (port 0 in the file: another).
    write_file(f.gw->config_path,
               gateway_yaml(f.up->port,
                            {{"service.http_listen", "\"127.0.0.1:1\""}, {"service.http_peers", "[\"127.0.0.2\"]"}},
                            limited_api));
    const auto reload = fetch(f.gw->admin_port, "POST", "/reload");
    REQUIRE(reload.status == 200);
    const auto body = json_of(reload);
    const auto& keys = body.at("restart_required").as_array();
    CHECK(std::find(keys.begin(), keys.end(), boost::json::value("service.http_listen")) != keys.end());
    CHECK(f.check("/api/a", "192.0.2.1").status == 403);
    connection c("127.0.0.1", f.port, 10s, "127.0.0.2");
    c.send(make_request("GET", "/check", {{"X-Original-URI", "/api/a"}, {"X-Forwarded-For", "192.0.2.1"}}));
    const auto r = c.read_response();
    CHECK(r.status == 200);
    CHECK(r.header("RateLimit").rfind(R"("ip-1h";r=1;t=)", 0) == 0);  // counts kept across the reload
}
