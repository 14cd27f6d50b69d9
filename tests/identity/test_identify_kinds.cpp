// The identify phase's reading of header, query and claim values for identifier kinds
// (identity/identify.hpp, identity::kind_names): only the names the policies use, only for
// a limited route and a client not allow-listed.
#include "identity/identify.hpp"

#include <doctest/doctest.h>
#include <jwt.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace {

namespace identity = sluice::identity;
namespace config = sluice::config;
namespace bhttp = boost::beast::http;

identity::address ip(const char* s) { return boost::asio::ip::make_address(s); }

std::vector<config::policy_config> policies_of(std::initializer_list<const char*> kinds) {
    config::policy_config p;
    p.name = "p";
    for (const char* k : kinds) {
        auto parsed = identity::parse_kind_spec(k);
        REQUIRE_MESSAGE(parsed.ok(), parsed.error);
        p.kinds.push_back({parsed.spec, {}, config::on_missing::skip, 0, {}, {}});
    }
    return {p};
}

sluice::http::message_head request(std::string_view target,
                                   std::initializer_list<std::pair<std::string_view, std::string_view>> fields) {
    sluice::http::message_head h;
    h.set_request_line(bhttp::verb::get, "GET", target, 11);
    h.add(bhttp::field::host, "Host", "example.test");
    for (const auto& [name, value] : fields) h.add(bhttp::string_to_field(name), name, value);
    return h;
}

std::optional<std::string> none() { return std::nullopt; }

}  // namespace

TEST_CASE("identify kinds: the names in use, sorted, once each") {
    const auto names = identity::names_used(policies_of(
        {"header:X-Tenant", "header:x-tenant+ip", "query:b", "query:a+header:X-Org", "claim:org", "route"}));
    CHECK(names.headers == std::vector<std::string>{"x-org", "x-tenant"});
    CHECK(names.queries == std::vector<std::string>{"a", "b"});
    CHECK(names.claims == std::vector<std::string>{"org"});
    CHECK(names.index_of({identity::part_kind::header, "x-tenant"}) == 1);
    CHECK(names.index_of({identity::part_kind::query, "b"}) == 1);
    CHECK(names.index_of({identity::part_kind::route, ""}) == 0);
    CHECK(identity::names_used(policies_of({"ip+user", "route"})).empty());
}

TEST_CASE("identify kinds: header values, the first field of each name, blanks trimmed") {
    config::clients_config cfg;
    cfg.allow = {{ip("192.0.2.128"), 25}};
    const identity::clients clients(cfg, policies_of({"header:X-Tenant", "header:X-Org+ip", "header:X-Empty"}));
    const auto req = request("/a", {{"x-tenant", "  acme corp "},
                                    {"X-Org", "org-1"},
                                    {"X-Tenant", "second"},
                                    {"X-Empty", " \t "},
                                    {"X-Other", "ignored"}});
    auto r = identity::identify(clients, req, ip("192.0.2.7"), true, 0);
    // clients.names.headers: x-empty, x-org, x-tenant
    REQUIRE(r.who.headers.size() == 3);
    CHECK(r.who.headers[0] == none());  // blank is missing
    CHECK(r.who.headers[1] == std::optional<std::string>("org-1"));
    CHECK(r.who.headers[2] == std::optional<std::string>("acme corp"));
    CHECK(r.who.queries.empty());
    CHECK(r.who.claims.empty());

    auto absent = identity::identify(clients, request("/a", {}), ip("192.0.2.7"), true, 0);
    REQUIRE(absent.who.headers.size() == 3);
    CHECK(absent.who.headers[2] == none());

    // Nothing is read for an unlimited route or an allow-listed client.
    CHECK(identity::identify(clients, req, ip("192.0.2.7"), false, 0).who.headers.empty());
    CHECK(identity::identify(clients, req, ip("192.0.2.200"), true, 0).who.headers.empty());
    // Nor with no such kinds at all.
    const identity::clients plain(cfg);
    CHECK(identity::identify(plain, req, ip("192.0.2.7"), true, 0).who.headers.empty());
}

TEST_CASE("identify kinds: query values, percent-decoded, the first of each name") {
    const config::clients_config cfg;
    const identity::clients clients(cfg, policies_of({"query:key", "query:q+ip", "query:flag", "query:a.b"}));
    // clients.names.queries: a.b, flag, key, q
    const auto at = [&](std::string_view target) {
        auto r = identity::identify(clients, request(target, {}), ip("192.0.2.7"), true, 0);
        REQUIRE(r.who.queries.size() == 4);
        return r.who.queries;
    };
    auto v = at("/s?key=k%2F1&q=hello+world&key=second&flag&a%2Eb=x");
    CHECK(v[0] == std::optional<std::string>("x"));  // the name is decoded too
    CHECK(v[1] == none());                           // no value is missing
    CHECK(v[2] == std::optional<std::string>("k/1"));
    CHECK(v[3] == std::optional<std::string>("hello world"));
    v = at("/s?key=&q=%41");
    CHECK(v[2] == none());  // empty is missing
    CHECK(v[3] == std::optional<std::string>("A"));
    v = at("/s");
    CHECK(v[2] == none());
    v = at("http://example.test/s?key=abs");
    CHECK(v[2] == std::optional<std::string>("abs"));
    v = at("/s?key=%zz&q=1");  // a query that does not parse gives nothing
    CHECK(v[2] == none());
    CHECK(v[3] == none());
}

TEST_CASE("identify kinds: claims come from the JWT that verified, and only from it") {
    const char* env = "SLUICE_TEST_IDENTIFY_KINDS_SECRET";
    const std::string secret = "an-identify-kinds-secret-of-32-bytes";
    REQUIRE(::setenv(env, secret.c_str(), 1) == 0);
    config::clients_config cfg;
    cfg.api_key_header = "X-API-Key";
    cfg.jwt = config::jwt_config{};
    cfg.jwt->algorithms = {"HS256"};
    cfg.jwt->secret_env = env;
    const identity::clients clients(cfg, policies_of({"claim:org", "claim:n+ip", "claim:flag", "claim:gone"}));
    ::unsetenv(env);
    const auto now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    jwt_t* j = nullptr;
    REQUIRE(jwt_new(&j) == 0);
    std::unique_ptr<jwt_t, decltype(&jwt_free)> guard(j, &jwt_free);
    REQUIRE(jwt_add_grant(j, "sub", "alice") == 0);
    REQUIRE(jwt_add_grant(j, "org", "acme") == 0);
    REQUIRE(jwt_add_grant_int(j, "n", 42) == 0);
    REQUIRE(jwt_add_grant_bool(j, "flag", 1) == 0);
    REQUIRE(jwt_add_grant_int(j, "exp", now + 3600) == 0);
    REQUIRE(jwt_set_alg(j, JWT_ALG_HS256, reinterpret_cast<const unsigned char*>(secret.data()),
                        static_cast<int>(secret.size())) == 0);
    char* encoded = jwt_encode_str(j);
    REQUIRE(encoded != nullptr);
    const std::string bearer = std::string("Bearer ") + encoded;
    std::free(encoded);

    auto r = identity::identify(clients, request("/", {{"Authorization", bearer}}), ip("192.0.2.7"), true, now);
    REQUIRE_FALSE(r.refused);
    CHECK(r.who.user == "jwt:alice");
    // clients.names.claims: flag, gone, n, org
    REQUIRE(r.who.claims.size() == 4);
    CHECK(r.who.claims[0] == none());  // a boolean is no identifier
    CHECK(r.who.claims[1] == none());
    CHECK(r.who.claims[2] == std::optional<std::string>("42"));
    CHECK(r.who.claims[3] == std::optional<std::string>("acme"));

    // An API key names the user: the token is not read, so there are no claims.
    auto keyed = identity::identify(clients, request("/", {{"Authorization", bearer}, {"X-API-Key", "k1"}}),
                                    ip("192.0.2.7"), true, now);
    CHECK(keyed.who.user == "key:k1");
    CHECK(keyed.who.claims.empty());
    // A token that fails is a 401, with no claims.
    auto forged =
        identity::identify(clients, request("/", {{"Authorization", bearer + "x"}}), ip("192.0.2.7"), true, now);
    CHECK(forged.refused);
    CHECK(forged.who.claims.empty());
}
