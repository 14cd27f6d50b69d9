// The API key registry (clients.user.api_keys): loaded from its own file with the config,
// keys looked up by SHA-256, a key's user its registry name.
#include "config/config.hpp"
#include "identity/user.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

namespace config = sluice::config;
using sluice::identity::user_resolver;
using status = enum sluice::identity::user_result::status;

const std::string fixtures = std::string(SLUICE_TEST_DIR) + "/config/fixtures";

// A config file in the fixtures directory (relative key files resolve against it).
std::shared_ptr<const config::config> with_keys(const std::string& api_keys) {
    // Unique per process and call: ctest runs test cases in parallel processes.
    static int calls = 0;
    const std::string path =
        fixtures + "/valid_api_keys." + std::to_string(::getpid()) + "." + std::to_string(++calls) + ".generated.yaml";
    {
        std::ofstream out(path);
        out << "upstream: { url: \"http://127.0.0.1:3000\" }\n"
               "plans:\n  pro: { user: [ {limit: 1000, per: 1d, algorithm: fixed} ] }\n"
               "clients:\n  user:\n    api_key_header: X-API-Key\n    api_keys: "
            << api_keys << "\n";
    }
    struct remove_after {
        std::string p;
        ~remove_after() { std::filesystem::remove(p); }
    } cleanup{path};
    return config::load_file(path);
}

std::string load_error(const std::string& api_keys) {
    try {
        with_keys(api_keys);
    } catch (const config::config_error& e) {
        return e.what();
    }
    return "<loaded>";
}

}  // namespace

TEST_CASE("api keys: the registry loads next to the config, and keys resolve to their user and plan") {
    auto c = with_keys("{ file: keys/good.keys.yaml, require_known: true }");
    REQUIRE(c->clients.api_keys);
    CHECK(c->clients.api_keys->require_known);
    REQUIRE(c->clients.api_keys->keys.size() == 3);
    CHECK(c->clients.api_keys->keys[2].plan.empty());

    const user_resolver u(c->clients);
    auto one = u.resolve("acme-key-one-0001", std::nullopt, 0);
    auto two = u.resolve("acme-key-two-0002", std::nullopt, 0);
    CHECK(one.status == status::ok);
    CHECK(one.id == "user:acme");  // two keys of one customer: one identity, one budget
    CHECK(two.id == one.id);
    CHECK(one.plan == "pro");
    CHECK(u.resolve("globex-key-0003", std::nullopt, 0).id == "user:globex");

    auto unknown = u.resolve("acme-key-one-0002", std::nullopt, 0);
    CHECK(unknown.status == status::invalid);
    CHECK(unknown.reason == "unknown API key");
    auto missing = u.resolve("", std::nullopt, 0);
    CHECK(missing.status == status::invalid);
    CHECK(missing.reason == "an API key is required");
}

TEST_CASE("api keys: without require_known an unknown key is counted per key, a missing one is no user") {
    auto c = with_keys("{ file: keys/good.keys.yaml }");
    const user_resolver u(c->clients);
    CHECK(u.resolve("acme-key-one-0001", std::nullopt, 0).id == "user:acme");
    auto unknown = u.resolve("someone-else", std::nullopt, 0);
    CHECK(unknown.status == status::ok);
    CHECK(unknown.id == "key:someone-else");
    CHECK(u.resolve("", std::nullopt, 0).status == status::none);
}

TEST_CASE("api keys: errors in the registry name its file, line and key") {
    const std::string dir = fixtures + "/keys/";
    CHECK(load_error("{ file: keys/bad_sha.keys.yaml }") ==
          dir +
              "bad_sha.keys.yaml:2:13: [1].sha256: expected 64 hex digits (the SHA-256 of the key), got 4 characters");
    CHECK(load_error("{ file: keys/duplicate.keys.yaml }") ==
          dir + "duplicate.keys.yaml:2:3: [1]: the same key as entry 0");
    CHECK(load_error("{ file: keys/unknown_plan.keys.yaml }") ==
          dir + "unknown_plan.keys.yaml:2:99: [1].plan: no plan named \"gold\"");
    const std::string missing = load_error("{ file: keys/none.yaml }");
    CHECK(missing.find(dir + "none.yaml: cannot read: No such file or directory") != std::string::npos);
    CHECK(missing.find("clients.user.api_keys.file") != std::string::npos);
    CHECK(load_error("{ file: keys/good.keys.yaml, other: 1 }").find("clients.user.api_keys.other: unknown key") !=
          std::string::npos);
}
