// The identify phase (identity/identify.hpp): a request's head and TCP peer -> the caller
// (client address, allow-listing, user and plan), or a refusal of its credentials.
#include "identity/identify.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace {

namespace identity = sluice::identity;
namespace config = sluice::config;
namespace bhttp = boost::beast::http;

identity::address ip(const char* s) { return boost::asio::ip::make_address(s); }

config::cidr net(const char* network, unsigned prefix) { return {ip(network), prefix}; }

sluice::http::message_head request_with(std::string_view name = {}, std::string_view value = {}) {
    sluice::http::message_head h;
    h.set_request_line(bhttp::verb::get, "GET", "/", 11);
    h.add(bhttp::field::host, "Host", "example.test");
    if (!name.empty()) h.add(bhttp::string_to_field(name), name, value);
    return h;
}

config::clients_config with_api_key(std::string header) {
    config::clients_config c;
    c.api_key_header = std::move(header);
    return c;
}

}  // namespace

TEST_CASE("identify: the client is the peer, or whom a trusted proxy names, and allow-listing follows the client") {
    config::clients_config cfg;
    cfg.trusted_proxies = {net("10.0.0.0", 8)};
    cfg.allow = {net("192.0.2.0", 24)};
    const identity::clients clients(cfg);
    const auto forwarded = request_with("X-Forwarded-For", "192.0.2.7");

    auto direct = identity::identify(clients, forwarded, ip("198.51.100.1"), true, 0);
    CHECK_FALSE(direct.refused);
    CHECK(direct.who.client == ip("198.51.100.1"));  // an untrusted peer cannot choose its address
    CHECK_FALSE(direct.who.peer_trusted);
    CHECK_FALSE(direct.who.allow_listed);

    auto proxied = identity::identify(clients, forwarded, ip("::ffff:10.1.2.3"), true, 0);
    CHECK(proxied.who.client == ip("192.0.2.7"));
    CHECK(proxied.who.peer_trusted);
    CHECK(proxied.who.allow_listed);
    CHECK(proxied.who.user.empty());
}

TEST_CASE("identify: an API key names the user, and its plan is clients.user.default_plan when it names none") {
    auto cfg = with_api_key("X-API-Key");
    const identity::clients clients(cfg);
    auto r = identity::identify(clients, request_with("x-api-key", "k1"), ip("192.0.2.7"), true, 0);
    CHECK_FALSE(r.refused);
    CHECK(r.who.user == "key:k1");
    CHECK(r.who.plan.empty());

    cfg.default_plan = "pro";
    r = identity::identify(clients, request_with("X-API-Key", "k1"), ip("192.0.2.7"), true, 0);
    CHECK(r.who.user == "key:k1");
    CHECK(r.who.plan == "pro");

    // No key is no user, and no plan.
    r = identity::identify(clients, request_with(), ip("192.0.2.7"), true, 0);
    CHECK_FALSE(r.refused);
    CHECK(r.who.user.empty());
    CHECK(r.who.plan.empty());
}

TEST_CASE("identify: a JWT that fails verification is refused (a 401), without echoing the token") {
    const char* env = "SLUICE_TEST_IDENTIFY_JWT_SECRET";
    REQUIRE(::setenv(env, "an-identify-test-secret-of-32-bytes", 1) == 0);
    config::clients_config cfg;
    cfg.jwt = config::jwt_config{};
    cfg.jwt->algorithms = {"HS256"};
    cfg.jwt->secret_env = env;
    cfg.allow = {net("192.0.2.128", 25)};
    const identity::clients clients(cfg);
    ::unsetenv(env);
    const auto bad = request_with("Authorization", "Bearer not-a.valid.jwt");

    auto r = identity::identify(clients, bad, ip("192.0.2.7"), true, 0);
    CHECK(r.refused);
    CHECK_FALSE(r.reason.empty());
    CHECK(r.reason.find("not-a") == std::string::npos);  // never echoes the token
    CHECK(r.who.user.empty());

    // No token at all is no user, not an error.
    auto anonymous = identity::identify(clients, request_with(), ip("192.0.2.7"), true, 0);
    CHECK_FALSE(anonymous.refused);
    CHECK(anonymous.who.user.empty());

    // Credentials are not read for a request no limit applies to (its route is unlimited),
    // nor for an allow-listed client, which bypasses every limit.
    auto unlimited = identity::identify(clients, bad, ip("192.0.2.7"), false, 0);
    CHECK_FALSE(unlimited.refused);
    CHECK(unlimited.who.user.empty());
    auto listed = identity::identify(clients, bad, ip("192.0.2.200"), true, 0);
    CHECK(listed.who.allow_listed);
    CHECK_FALSE(listed.refused);
}
