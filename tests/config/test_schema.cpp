#include <doctest/doctest.h>

#include <algorithm>
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
                            "admin.listen",
                            "upstream.url",
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
                            "routes[].max_cost"}) {
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
                                            "admin.listen",
                                            "upstream.url",
                                            "upstream.max_idle_per_worker",
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
                                            "store.hash_secret_env"};
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
    CHECK(next.upstream.timeout == std::chrono::seconds(9));              // applies at once
    CHECK(next.store.on_error == cfg::store_config::failure_mode::deny);  // allow to deny applies at once

    next.store.on_error = cfg::store_config::failure_mode::local;  // to local needs another store
    CHECK(keep_all(next, *running) == std::vector<std::string>{"store.on_error"});
    CHECK(next.store.on_error == cfg::store_config::failure_mode::allow);
    CHECK(keep_all(next, *running).empty());
}
