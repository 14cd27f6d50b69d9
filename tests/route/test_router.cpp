#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "limit/policy.hpp"
#include "route/router.hpp"
#include "route/target.hpp"

namespace cfg = sluice::config;
namespace rt = sluice::route;

namespace {

cfg::route_config exact(std::string name, std::string path) {
    cfg::route_config r;
    r.name = std::move(name);
    r.path = std::move(path);
    r.policy = "none";
    return r;
}

cfg::route_config prefix(std::string name, std::string path_prefix) {
    cfg::route_config r;
    r.name = std::move(name);
    r.path_prefix = std::move(path_prefix);
    r.policy = "none";
    return r;
}

// A router over `routes` and the name of the route a request gets ("" for none).
class fixture {
public:
    explicit fixture(std::vector<cfg::route_config> routes) : router_(make(std::move(routes)), policies_) {}

    std::string match(std::string_view method, std::string_view raw,
                      std::string_view host_header = "example.com") const {
        rt::request_target t;
        const char* why = rt::parse_target(method, raw, t);
        if (why != nullptr) return std::string("refused: ") + why;
        const rt::route* r = router_.match(method, host_header, t);
        return r == nullptr ? std::string() : r->name;
    }

private:
    static cfg::config make(std::vector<cfg::route_config> routes) {
        cfg::config c;
        c.routes = std::move(routes);
        return c;
    }

    std::vector<sluice::limit::policy> policies_;
    rt::router router_;
};

}  // namespace

TEST_CASE("route: no spelling of /login walks around its route") {
    const fixture f({exact("login", "/login"), prefix("all", "/")});
    for (std::string_view raw :
         {"/login", "//login", "/./login", "/a/../login", "/%6Cogin", "/log%69n", "/login/", "/login;a", "/login//",
          "/login/.", "/%2e%2e/login", "/a/..;x/login", "/;x/login", "/login;jsessionid=1", "/login?x=1",
          "http://example.com/login", "http://example.com//a/%2E%2E/login/?q"}) {
        CAPTURE(raw);
        CHECK(f.match("GET", raw) == "login");
    }
    for (std::string_view raw : {"/%2Flogin", "/login%2F", "/%5Clogin", "/\\login", "/login%00"}) {
        CAPTURE(raw);
        CHECK(f.match("GET", raw).starts_with("refused: "));
    }
    // Not /login: the catch-all.
    for (std::string_view raw :
         {"/loginx", "/login/x", "/login//x", "/LOGIN", "/login%3B", "/logi", "/login%2e", "/login."}) {
        CAPTURE(raw);
        CHECK(f.match("GET", raw) == "all");
    }
}

TEST_CASE("route: an exact path matches one trailing slash more, not less") {
    const fixture f({exact("root", "/"), exact("dir", "/dir/"), exact("file", "/file")});
    CHECK(f.match("GET", "/") == "root");
    CHECK(f.match("GET", "//") == "root");
    CHECK(f.match("GET", "/dir/") == "dir");
    CHECK(f.match("GET", "/dir//") == "dir");
    CHECK(f.match("GET", "/dir").empty());
    CHECK(f.match("GET", "/file") == "file");
    CHECK(f.match("GET", "/file/") == "file");
    CHECK(f.match("GET", "/file/;x") == "file");
    CHECK(f.match("GET", "/filex").empty());
}

TEST_CASE("route: path_prefix is a plain prefix of the normalised path") {
    const fixture f({prefix("api", "/api"), prefix("v2", "/v2/")});
    CHECK(f.match("GET", "/api") == "api");
    CHECK(f.match("GET", "/api/x") == "api");
    CHECK(f.match("GET", "/apix") == "api");  // kept: a prefix, not a segment boundary
    CHECK(f.match("GET", "//api/../api/x") == "api");
    CHECK(f.match("GET", "/%61pi/x") == "api");
    CHECK(f.match("GET", "/ap").empty());
    CHECK(f.match("GET", "/API/x").empty());
    CHECK(f.match("GET", "/v2/") == "v2");
    CHECK(f.match("GET", "/v2").empty());
    CHECK(f.match("GET", "/x/../v2/a") == "v2");
}

TEST_CASE("route: case_insensitive compares ASCII-lowercased") {
    auto login = exact("login", "/Login");
    login.case_insensitive = true;
    auto api = prefix("api", "/API/");
    api.case_insensitive = true;
    const fixture f({login, api, exact("strict", "/Strict")});
    CHECK(f.match("GET", "/login") == "login");
    CHECK(f.match("GET", "/LOGIN") == "login");
    CHECK(f.match("GET", "/LoGiN/") == "login");
    CHECK(f.match("GET", "/LOG%49N") == "login");
    CHECK(f.match("GET", "/LOG%69N;x") == "login");
    CHECK(f.match("GET", "/api/x") == "api");
    CHECK(f.match("GET", "/Api/X") == "api");
    CHECK(f.match("GET", "/Strict") == "strict");
    CHECK(f.match("GET", "/strict").empty());
}

TEST_CASE("route: the host is the absolute-form authority's, else the Host header's") {
    auto api = exact("api", "/login");
    api.host = "api.example.com";
    const fixture f({api, exact("other", "/login")});
    CHECK(f.match("GET", "/login", "api.example.com") == "api");
    CHECK(f.match("GET", "/login", "API.Example.com:8080") == "api");
    CHECK(f.match("GET", "/login", "www.example.com") == "other");
    CHECK(f.match("GET", "/login", "") == "other");
    // The authority overrides the Host header (RFC 9112 3.2.2).
    CHECK(f.match("GET", "http://www.example.com/login", "api.example.com") == "other");
    CHECK(f.match("GET", "http://API.example.com:8080/login", "www.example.com") == "api");
    CHECK(f.match("GET", "http://api.example.com/%6Cogin/", "") == "api");
    CHECK(f.match("GET", "http://user@api.example.com/login", "api.example.com") ==
          "refused: userinfo in request target");
}

TEST_CASE("route: a Host header's port and IPv6 brackets") {
    auto v6 = exact("v6", "/x");
    v6.host = "[::1]";  // not a config value (hosts are DNS names there), but the rule holds
    const fixture f({v6});
    CHECK(f.match("GET", "/x", "[::1]:8080") == "v6");
    CHECK(f.match("GET", "/x", "[::1]") == "v6");
    CHECK(f.match("GET", "http://[::1]:8080/x", "") == "v6");
}

TEST_CASE("route: asterisk-form only reaches catch-all routes") {
    auto options_only = prefix("options", "/");
    options_only.methods = {"OPTIONS"};
    const fixture f({exact("login", "/login"), prefix("api", "/api"), options_only, prefix("all", "/")});
    CHECK(f.match("OPTIONS", "*") == "options");
    CHECK(f.match("GET", "*") == "refused: asterisk-form target is only allowed with OPTIONS");
    const fixture narrow({exact("login", "/login"), prefix("api", "/api"), exact("root", "/")});
    CHECK(narrow.match("OPTIONS", "*").empty());
}

TEST_CASE("route: CONNECT matches no route") {
    const fixture f({prefix("all", "/")});
    CHECK(f.match("CONNECT", "example.com:443").empty());
    CHECK(f.match("CONNECT", "/").empty());
}

TEST_CASE("route: methods and order") {
    auto post = exact("post-login", "/login");
    post.methods = {"POST"};
    const fixture f({post, exact("login", "/login")});
    CHECK(f.match("POST", "/login/") == "post-login");
    CHECK(f.match("GET", "/login") == "login");
    CHECK(f.match("post", "/login") == "login");  // methods are case-sensitive
}

TEST_CASE("route: routes loaded from a config file") {
    const auto c = cfg::load_string(R"(
upstream: {url: "http://127.0.0.1:3000"}
routes:
  - match: {path: /Login, case_insensitive: true}
    policy: none
  - match: {path: /login}
    name: never
    policy: none
  - match: {path_prefix: /}
    name: all
    policy: none
)",
                                    "inline.yaml");
    const auto policies = sluice::limit::compile_policies(*c);
    const rt::router r(*c, policies);
    REQUIRE(r.routes().size() == 3);
    CHECK(r.routes()[0].case_insensitive);
    CHECK(r.routes()[0].path == "/login");
    CHECK_FALSE(r.routes()[1].case_insensitive);
    rt::request_target t;
    for (std::string_view raw : {"/LOGIN", "/login/", "/%4Cogin", "/x/../LOGIN;a"}) {
        CAPTURE(raw);
        REQUIRE(rt::parse_target("GET", raw, t) == nullptr);
        const rt::route* m = r.match("GET", "h", t);
        REQUIRE(m != nullptr);
        CHECK(m->name == "/Login");
    }
    REQUIRE(rt::parse_target("GET", "/other", t) == nullptr);
    REQUIRE(r.match("GET", "h", t) != nullptr);
    CHECK(r.match("GET", "h", t)->name == "all");
}

TEST_CASE("routes: a route's path must already be in normalised form, or the router refuses the config") {
    auto route_error = [](const std::string& match) -> std::string {
        auto cfg = sluice::config::load_string(
            "upstream: {url: 'http://h'}\nroutes:\n  - policy: none\n    match: " + match + "\n", "inline.yaml");
        try {
            sluice::route::router r(*cfg, {});
        } catch (const sluice::config::config_error& e) {
            return e.what();
        }
        return "<no error>";
    };
    CHECK(route_error("{path: /a//b}") ==
          R"(inline.yaml:4:19: routes[0].match.path: "/a//b" is not a normalised path (did you mean "/a/b"?))");
    CHECK(route_error("{path: /a/./b/../c}") ==
          R"(inline.yaml:4:19: routes[0].match.path: "/a/./b/../c" is not a normalised path (did you mean "/a/c"?))");
    CHECK(route_error("{path: /%6Cogin}") ==
          R"(inline.yaml:4:19: routes[0].match.path: "/%6Cogin" is not a normalised path (did you mean "/login"?))");
    CHECK(route_error("{path: /%c3%a9}") ==
          R"(inline.yaml:4:19: routes[0].match.path: "/%c3%a9" is not a normalised path (did you mean "/%C3%A9"?))");
    CHECK(route_error("{path: /login;a}") ==
          R"(inline.yaml:4:19: routes[0].match.path: "/login;a" is not a normalised path (did you mean "/login"?))");
    CHECK(
        route_error("{path_prefix: /api/.}") ==
        R"(inline.yaml:4:26: routes[0].match.path_prefix: "/api/." is not a normalised path (did you mean "/api/"?))");
    CHECK(route_error("{path_prefix: //}") ==
          R"(inline.yaml:4:26: routes[0].match.path_prefix: "//" is not a normalised path (did you mean "/"?))");
    CHECK(route_error("{path: /a%2Fb}") ==
          R"(inline.yaml:4:19: routes[0].match.path: "/a%2Fb" is not a valid path: encoded / or \ in path)");
    CHECK(route_error("{path: /a%zz}") ==
          R"(inline.yaml:4:19: routes[0].match.path: "/a%zz" is not a valid path: invalid percent-encoding in path)");
    CHECK(route_error("{path: '/a\\b'}") ==
          R"(inline.yaml:4:19: routes[0].match.path: "/a\b" is not a valid path: backslash in path)");
    CHECK(
        route_error("{path: /é}") ==
        R"(inline.yaml:4:19: routes[0].match.path: "/é" is not a valid path: control, space or non-ASCII byte in path)");
    // Already normalised: accepted as written.
    for (const char* ok : {"{path: /}", "{path: /login/}", "{path: /a/.b/c..}", "{path: /%C3%A9}", "{path: '/a%3Bb'}",
                           "{path_prefix: /api}", "{path: /Login}"}) {
        CAPTURE(ok);
        CHECK(route_error(ok) == "<no error>");
    }
}

TEST_CASE("route: charge, and policy_settles on every route of a policy one route settles under") {
    const auto c = cfg::load_string(R"(
upstream: {url: "http://127.0.0.1:3000"}
policies:
  login: { ip: [ {limit: 5, per: 1m} ] }
  metered: { ip: [ {limit: 50, per: 1m} ] }
  plain: { ip: [ {limit: 5, per: 1m} ] }
routes:
  - { match: {path: /login}, policy: login, charge: { on_status: [401] } }
  - { match: {path: /login-again}, policy: login }
  - { match: {path: /metered}, policy: metered, cost_header: X-Cost, max_cost: 9 }
  - { match: {path: /plain}, policy: plain }
  - { match: {path: /free}, policy: none }
)",
                                    "inline.yaml");
    const auto policies = sluice::limit::compile_policies(*c);
    const rt::router r(*c, policies);
    REQUIRE(r.routes().size() == 5);
    REQUIRE(r.routes()[0].charge);
    CHECK(r.routes()[0].charge->charged(401));
    CHECK_FALSE(r.routes()[0].charge->charged(200));
    CHECK_FALSE(r.routes()[1].charge);
    CHECK(r.routes()[0].policy_settles);
    CHECK(r.routes()[1].policy_settles);  // its counts may be given back by the first route's settlements
    CHECK(r.routes()[2].policy_settles);
    CHECK_FALSE(r.routes()[3].policy_settles);
    CHECK_FALSE(r.routes()[4].policy_settles);
}
