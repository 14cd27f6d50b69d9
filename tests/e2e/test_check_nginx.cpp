// A real nginx in front of a real upstream, limiting through Sluice's HTTP check with
// auth_request: the server block is docs/check.md's, read from the page, with this run's
// ports. The client sees 200s with the rate-limit fields, then 429 with Retry-After and the
// fields; refused requests never reach the upstream.
#include "e2e.hpp"

#include <filesystem>

using namespace sluice::test;

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
    for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
}

// The ```nginx block of docs/check.md.
std::string documented_nginx_config() {
    const std::string page = read_file(SLUICE_TEST_DIR "/../docs/check.md");
    const std::string open = "```nginx\n";
    const auto start = page.find(open);
    if (start == std::string::npos) return "";
    const auto end = page.find("```", start + open.size());
    return page.substr(start + open.size(), end - start - open.size());
}

struct nginx_front {
    nginx_front(std::uint16_t check_port, std::uint16_t app_port) : port(unused_port()), dir(make_temp_dir()) {
        if (::system("command -v nginx >/dev/null 2>&1") != 0)
            FAIL("nginx is not installed: the check tests need it (scripts/install-deps.sh installs it)");
        std::string block = documented_nginx_config();
        REQUIRE(block.find("auth_request /.sluice-check;") != std::string::npos);
        replace_all(block, "127.0.0.1:8082", "127.0.0.1:" + std::to_string(check_port));
        replace_all(block, "127.0.0.1:3000", "127.0.0.1:" + std::to_string(app_port));
        replace_all(block, "listen 80;", "listen 127.0.0.1:" + std::to_string(port) + ";");
        std::string conf = R"(daemon off;
master_process off;
pid DIR/nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path DIR/body;
  proxy_temp_path DIR/proxy;
  fastcgi_temp_path DIR/fastcgi;
  uwsgi_temp_path DIR/uwsgi;
  scgi_temp_path DIR/scgi;
)";
        replace_all(conf, "DIR", dir);
        conf += block + "}\n";
        write_file(dir + "/nginx.conf", conf);
        proc = std::make_unique<process>(std::vector<std::string>{"nginx", "-p", dir, "-c", dir + "/nginx.conf"});
        const bool up = eventually([&] { return accepts_connections(port); });
        if (!up) FAIL("nginx did not listen on port " << port << ":\n" << proc->output());
    }
    ~nginx_front() {
        proc.reset();
        if (!std::getenv("SLUICE_TEST_KEEP_TMP")) std::filesystem::remove_all(dir);
    }
    std::uint16_t port;
    std::string dir;
    std::unique_ptr<process> proc;
};

}  // namespace

TEST_CASE("nginx auth_request through /check: 200s with the fields, then 429 with Retry-After and the fields") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {{"service.http_listen", "\"127.0.0.1:0\""}}, R"(
policies:
  p: { ip: [ {limit: 3, per: 1h, algorithm: log} ] }
routes:
  - { match: { path_prefix: /api }, policy: p }
  - { match: { path_prefix: /free }, policy: none }
)"));
    const auto m = gw->proc->wait_for_line(R"(check listening on 127\.0\.0\.1:([0-9]+))");
    nginx_front nginx(static_cast<std::uint16_t>(std::stoi(m[1])), up->port);

    for (int i = 0; i < 3; ++i) {
        CAPTURE(i);
        const auto r = fetch(nginx.port, "GET", "/api/items?n=" + std::to_string(i));
        REQUIRE(r.status == 200);
        CHECK(json_of(r).at("target").as_string() == "/api/items?n=" + std::to_string(i));  // the upstream's echo
        CHECK(r.header("RateLimit-Policy") == R"("ip-1h";q=3;w=3600)");
        CHECK(r.header("RateLimit").rfind(R"("ip-1h";r=)" + std::to_string(2 - i) + ";t=", 0) == 0);
        CHECK_FALSE(r.has_header("Retry-After"));
    }
    for (int i = 0; i < 2; ++i) {
        const auto refused = fetch(nginx.port, "POST", "/api/items", {}, "a body nginx keeps from the check");
        REQUIRE(refused.status == 429);
        const auto retry = std::stoll(refused.header("Retry-After"));
        CHECK(retry > 3500);
        CHECK(retry <= 3600);
        CHECK(refused.header("RateLimit-Policy") == R"("ip-1h";q=3;w=3600)");
        CHECK(refused.header("RateLimit").rfind(R"("ip-1h";r=0;t=)", 0) == 0);
        CHECK(json_of(refused).at("error").as_string() == "rate_limited");
    }
    // An unlimited route passes, without fields.
    const auto free = fetch(nginx.port, "GET", "/free/x");
    CHECK(free.status == 200);
    CHECK_FALSE(free.has_header("RateLimit"));
    // The upstream saw the 3 admitted requests and the free one, no refused one.
    CHECK(boost::json::parse(fetch(up->port, "GET", "/stats").body).as_object().at("requests").to_number<int>() == 4);
    const auto metrics = fetch(gw->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(metrics, R"(sluice_rate_limit_decisions_total{policy="p",result="limited",listener="check"})") ==
          2);
}

TEST_CASE("nginx auth_request through /check: a 401 of the check stays a 401, a 400 a 400") {
    const std::string secret = "e2e-secret-for-nginx";
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {{"service.http_listen", "\"127.0.0.1:0\""}}, R"(
clients:
  user:
    jwt: { algorithms: [HS256], secret_env: SLUICE_E2E_JWT }
policies:
  p:
    user: [ {limit: 5, per: 1h, algorithm: log} ]
    header:X-Tenant: [ {limit: 5, per: 1h, algorithm: log} ]
    on_missing: { header:X-Tenant: refuse }
routes:
  - { match: { path_prefix: /api }, policy: p }
)"),
                            {}, {{"SLUICE_E2E_JWT", secret}});
    const auto m = gw->proc->wait_for_line(R"(check listening on 127\.0\.0\.1:([0-9]+))");
    nginx_front nginx(static_cast<std::uint16_t>(std::stoi(m[1])), up->port);

    const auto ok = fetch(nginx.port, "GET", "/api/a",
                          {{"Authorization", "Bearer " + hs256_token(secret, "alice", 600)}, {"X-Tenant", "acme"}});
    CHECK(ok.status == 200);
    CHECK(ok.header("RateLimit-Policy").find(R"("user-1h";q=5;w=3600)") != std::string::npos);
    const auto expired =
        fetch(nginx.port, "GET", "/api/a",
              {{"Authorization", "Bearer " + hs256_token(secret, "bob", -3600)}, {"X-Tenant", "acme"}});
    CHECK(expired.status == 401);
    const auto no_tenant =
        fetch(nginx.port, "GET", "/api/a", {{"Authorization", "Bearer " + hs256_token(secret, "alice", 600)}});
    CHECK(no_tenant.status == 400);
    CHECK(json_of(no_tenant).at("error").as_string() == "bad_request");
    CHECK(boost::json::parse(fetch(up->port, "GET", "/stats").body).as_object().at("requests").to_number<int>() == 1);
}
