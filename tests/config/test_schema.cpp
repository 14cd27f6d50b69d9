#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace cfg = sluice::config;

namespace {

bool has(const std::vector<std::string>& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::vector<std::string> restart_only_names() {
    std::vector<std::string> out;
    for (const auto& k : cfg::restart_only_keys()) out.push_back(k.key);
    return out;
}

// What a reload keeps of `running` when the file says `next`, and the keys it names.
std::vector<std::string> keep_all(cfg::config& next, const cfg::config& running) {
    std::vector<std::string> changed;
    for (const auto& k : cfg::restart_only_keys()) {
        if (k.keep(next, running)) changed.push_back(k.key);
    }
    return changed;
}

}  // namespace

TEST_CASE("schema_keys: every key once, list items as [] and names the user chooses as <name>") {
    const auto keys = cfg::schema_keys();
    for (const char* key : {"server.listen",
                            "server.max_body_bytes",
                            "server.proxy_protocol.trusted",
                            "server.proxy_protocol.header_timeout",
                            "admin.listen",
                            "proxy.request_buffer_bytes",
                            "log.access.path",
                            "store.memory.max_keys",
                            "store.redis.tls.ca_file",
                            "store.redis.sentinel.nodes",
                            "store.hash_secret_env",
                            "clients.trusted_proxies",
                            "clients.user.api_keys.file",
                            "clients.user.jwt.plan_claim",
                            "response.headers",
                            "plans.<name>.user",
                            "plans.<name>.user[].per",
                            "policies.<name>.shadow",
                            "policies.<name>.ip[].lease",
                            "policies.<name>.user[].window_offset",
                            "routes[].match.path_prefix",
                            "routes[].max_cost",
                            "routes[].upstream",
                            "upstream.url",
                            "upstream.servers[].weight",
                            "upstreams.<name>.servers[].url",
                            "upstreams.<name>.health.passive.eject_for",
                            "upstreams.<name>.queue.timeout",
                            "service.grpc_listen",
                            "service.domains.<domain>.descriptors[].value",
                            "service.domains.<domain>.descriptors[].tiers[].algorithm"}) {
        CHECK_MESSAGE(has(keys, key), key);
    }
    CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());
    CHECK(keys.front() == "server");   // schema order
    CHECK_FALSE(has(keys, "sha256"));  // the key registry is a file of its own
    CHECK_FALSE(has(keys, "clients.user.api_keys.sha256"));
}

TEST_CASE("restart_only_keys: the keys a reload keeps, declared by the schema") {
    const std::vector<std::string> expected{"server.listen",
                                            "server.threads",
                                            "server.max_connections",
                                            "server.tls.listen",
                                            "admin.listen",
                                            "log.access.path",
                                            "store.type",
                                            "store.memory.max_keys",
                                            "store.redis.nodes",
                                            "store.redis.tls",
                                            "store.redis.sentinel",
                                            "store.redis.password_env",
                                            "store.redis.username",
                                            "store.redis.database",
                                            "store.redis.timeout",
                                            "store.redis.start_timeout",
                                            "store.redis.key_prefix",
                                            "store.on_error",
                                            "store.fleet_size",
                                            "store.hash_secret_env",
                                            "service.grpc_listen",
                                            "service.max_concurrent_calls",
                                            "service.http_listen"};
    CHECK(restart_only_names() == expected);
    const auto keys = cfg::schema_keys();
    for (const auto& k : expected) CHECK_MESSAGE(has(keys, k), k);
}

TEST_CASE("restart_only_keys: keep puts back the running value and names what the file changed") {
    const auto running = cfg::load_string(R"(
server: { listen: '127.0.0.1:8080', threads: 2 }
upstream: { url: 'http://127.0.0.1:3000', timeout: 5s }
store: { type: redis, on_error: allow, redis: { timeout: 20ms } }
)",
                                          "running.yaml");
    auto next = *cfg::load_string(R"(
server: { listen: '127.0.0.1:8081', threads: 2 }
upstream: { url: 'http://127.0.0.1:3000', timeout: 9s }
store: { type: redis, on_error: deny, redis: { timeout: 30ms } }
)",
                                  "next.yaml");
    CHECK(keep_all(next, *running) == std::vector<std::string>{"server.listen", "store.redis.timeout"});
    CHECK(next.server.listen == running->server.listen);
    CHECK(next.store.redis_timeout == running->store.redis_timeout);
    CHECK(next.upstreams.front().timeout == std::chrono::seconds(9));     // applies at once
    CHECK(next.store.on_error == cfg::store_config::failure_mode::deny);  // allow to deny applies at once

    next.store.on_error = cfg::store_config::failure_mode::local;  // to local needs another store
    CHECK(keep_all(next, *running) == std::vector<std::string>{"store.on_error"});
    CHECK(next.store.on_error == cfg::store_config::failure_mode::allow);
    CHECK(keep_all(next, *running).empty());
}

// docs/configuration.md is the reference: its key tables ("| `dotted.key` | default | meaning |")
// name every key the loader reads (a mapping may be documented through its keys alone), and
// no key the loader would refuse. Tier keys are documented once, under policies.<name>.ip[]:
// user tiers, other kinds' tiers, a plan's tiers and a descriptor's tiers take the same keys. Pool keys likewise, under
// upstreams.<name>: the upstream: block is a pool too.
TEST_CASE("docs/configuration.md documents every key of the schema, and no other") {
    std::ifstream in(SLUICE_TEST_DIR "/../docs/configuration.md");
    REQUIRE(in);
    std::set<std::string> documented;
    const std::regex row(R"(^\| `([^`]+)` \|)");
    std::string line;
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, row)) documented.insert(m[1]);
    }
    REQUIRE(documented.size() > 50);

    const auto schema = cfg::schema_keys();
    const auto as_documented = [](std::string key) {
        for (const std::string tiers : {"policies.<name>.user[]", "policies.<name>.<kind>[]", "plans.<name>.user[]",
                                        "service.domains.<domain>.descriptors[].tiers[]"}) {
            if (key.rfind(tiers, 0) == 0) key = "policies.<name>.ip[]" + key.substr(tiers.size());
        }
        if (key.rfind("upstream.", 0) == 0) key = "upstreams.<name>." + key.substr(9);
        return key;
    };
    std::set<std::string> known;
    for (const auto& key : schema) known.insert(as_documented(key));
    const auto is_parent = [&](const std::string& key) {
        return std::any_of(known.begin(), known.end(), [&](const std::string& k) {
            return k.size() > key.size() && k.rfind(key, 0) == 0 && (k[key.size()] == '.' || k[key.size()] == '[');
        });
    };
    for (const auto& key : known) {
        CAPTURE(key);
        CHECK_MESSAGE((documented.count(key) == 1 || is_parent(key)), "a key docs/configuration.md does not document");
    }
    for (const auto& key : documented) {
        CAPTURE(key);
        CHECK_MESSAGE(known.count(key) == 1, "docs/configuration.md documents a key the loader does not read");
    }
}
