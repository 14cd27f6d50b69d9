// The Redis store over TLS: a real redis-server with a TLS port and certificates the test
// makes with the openssl CLI.
#include "e2e.hpp"

#include <csignal>
#include <filesystem>

using namespace sluice::test;
using namespace std::chrono;

namespace {

// redis-server with only a TLS port; `clients`: --tls-auth-clients yes | optional.
struct tls_redis {
    tls_redis(const tls_files& f, std::uint16_t p, const std::string& clients) : port(p) {
        proc = std::make_unique<process>(std::vector<std::string>{"redis-server",
                                                                  "--port",
                                                                  "0",
                                                                  "--tls-port",
                                                                  std::to_string(port),
                                                                  "--bind",
                                                                  "127.0.0.1",
                                                                  "--tls-cert-file",
                                                                  f.file("server.pem"),
                                                                  "--tls-key-file",
                                                                  f.file("server.key"),
                                                                  "--tls-ca-cert-file",
                                                                  f.file("ca.pem"),
                                                                  "--tls-auth-clients",
                                                                  clients,
                                                                  "--save",
                                                                  "",
                                                                  "--appendonly",
                                                                  "no",
                                                                  "--maxmemory-policy",
                                                                  "noeviction"});
        proc->wait_for_line("Ready to accept connections");
    }
    std::uint16_t port;
    std::unique_ptr<process> proc;
};

// Two routes: /exact at 5 per hour per client address (taken from X-Forwarded-For).
std::string tls_yaml(std::uint16_t redis_port, const std::string& tls) {
    return "store:\n  type: redis\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis_port) +
           "\"], timeout: 2s, tls: " + tls +
           " }\nclients: { trusted_proxies: [\"127.0.0.1/32\"] }\n"
           "policies:\n  exact:\n    ip: [ {limit: 5, per: 1h} ]\n"
           "routes:\n  - { match: { path_prefix: / }, policy: exact }\n";
}

bool ready(const gateway& g) { return fetch(g.admin_port, "GET", "/readyz").status == 200; }

// The statuses of `n` requests from client address `ip`.
std::vector<int> statuses(const gateway& g, const std::string& ip, int n) {
    std::vector<int> out;
    for (int i = 0; i < n; ++i) out.push_back(fetch(g.port, "GET", "/exact", {{"X-Forwarded-For", ip}}).status);
    return out;
}

const std::vector<int> five_then_429{200, 200, 200, 200, 200, 429, 429};

}  // namespace

TEST_CASE("redis tls: limits exact over TLS with a client certificate, and a restarted Redis is reconnected") {
    tls_files f;
    auto redis = std::make_unique<tls_redis>(f, unused_port(), "yes");
    const auto port = redis->port;
    auto up = start_upstream();
    auto gw = start_gateway(
        gateway_yaml(up->port, {},
                     tls_yaml(port, "{ ca_file: \"" + f.file("ca.pem") + "\", cert_file: \"" + f.file("client.pem") +
                                        "\", key_file: \"" + f.file("client.key") + "\" }")));
    REQUIRE(eventually([&] { return ready(*gw); }));
    CHECK(statuses(*gw, "10.1.0.1", 7) == five_then_429);
    auto r = fetch(gw->port, "GET", "/exact", {{"X-Forwarded-For", "10.1.0.2"}});
    CHECK(r.status == 200);
    CHECK(r.has_header("RateLimit"));

    redis->proc->signal(SIGTERM);
    redis->proc->wait_exit(10s);
    REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 503; }));
    CHECK(fetch(gw->port, "GET", "/exact", {{"X-Forwarded-For", "10.1.0.3"}}).status == 503);  // on_error deny
    redis = std::make_unique<tls_redis>(f, port, "yes");
    REQUIRE(eventually([&] { return ready(*gw); }, seconds(5)));
    CHECK(statuses(*gw, "10.1.0.4", 7) == five_then_429);
}

TEST_CASE("redis tls: a certificate from another CA, or for another name, is refused") {
    tls_files f;
    tls_redis redis(f, unused_port(), "optional");
    auto up = start_upstream();
    // These two never connect: they listen at once rather than after store.redis.start_timeout.
    const auto at_once = [](std::string yaml) {
        return std::regex_replace(yaml, std::regex("timeout: 2s"), "timeout: 2s, start_timeout: 0s");
    };
    auto other_ca = start_gateway(
        gateway_yaml(up->port, {}, at_once(tls_yaml(redis.port, "{ ca_file: \"" + f.file("other.pem") + "\" }"))));
    auto wrong_name = start_gateway(gateway_yaml(
        up->port, {},
        at_once(tls_yaml(redis.port, "{ ca_file: \"" + f.file("ca.pem") + "\", server_name: redis.example }"))));
    auto right_name = start_gateway(gateway_yaml(
        up->port, {}, tls_yaml(redis.port, "{ ca_file: \"" + f.file("ca.pem") + "\", server_name: localhost }")));

    // Each refusal is logged (once per worker while it repeats); the gateway stays unready.
    other_ca->proc->wait_for_line("TLS with 127\\.0\\.0\\.1:\\d+ failed: certificate verify failed");
    wrong_name->proc->wait_for_line("TLS with 127\\.0\\.0\\.1:\\d+ failed: certificate verify failed");
    for (auto* g : {other_ca.get(), wrong_name.get()}) {
        CHECK(fetch(g->admin_port, "GET", "/readyz").status == 503);
        auto r = fetch(g->port, "GET", "/exact", {{"X-Forwarded-For", "10.2.0.1"}});
        CHECK(r.status == 503);
        CHECK(json_of(r).at("error").as_string() == "store_unavailable");
    }
    // The control: the same server verifies with the right CA and name (no client certificate).
    REQUIRE(eventually([&] { return ready(*right_name); }));
    CHECK(statuses(*right_name, "10.2.0.2", 7) == five_then_429);
}

TEST_CASE("redis tls: a ca_file that is not PEM stops the start, with the key named") {
    tls_files f;
    auto up = start_upstream();
    write_file(f.file("junk.pem"), "not a certificate\n");
    auto gw = launch_gateway(
        gateway_yaml(up->port, {}, tls_yaml(unused_port(), "{ ca_file: \"" + f.file("junk.pem") + "\" }")));
    gw->proc->wait_for_line("store\\.redis\\.tls\\.ca_file: cannot load");
    CHECK(gw->proc->wait_exit(10s).value_or(0) != 0);
}
