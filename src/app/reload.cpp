#include "app/reload.hpp"

namespace sluice::app {

namespace {

// Keeps the running value of a start-only setting, noting the key if the file changed it.
template <class T>
void keep(T& next, const T& running, const char* key, std::vector<std::string>& changed) {
    if (next == running) return;
    changed.emplace_back(key);
    next = running;
}

// A file cut short (a full disk, an in-place writer that stopped for longer than the
// stable read waits) still parses: YAML has no terminator. One that would remove every
// policy or route of the running config is taken for such a file rather than for an
// intent to stop limiting.
std::string truncated(const config::config& next, const config::config& running) {
    auto lost = [](const char* what, std::size_t before) {
        return "the file has no " + std::string(what) + " while the running configuration has " +
               std::to_string(before) +
               "; refusing a reload that would turn limiting off (is the file complete?); "
               "restart Sluice to run without them";
    };
    if (next.policies.empty() && !running.policies.empty()) return lost("policies", running.policies.size());
    if (next.routes.empty() && !running.routes.empty()) return lost("routes", running.routes.size());
    const auto& keys = running.clients.api_keys;
    if (keys && !keys->keys.empty() && next.clients.api_keys && next.clients.api_keys->keys.empty()) {
        return "the API key registry " + next.clients.api_keys->file + " has no keys while the running one has " +
               std::to_string(keys->keys.size()) + "; refusing a reload that would refuse every key (is the file " +
               "complete?); restart Sluice to run with an empty registry";
    }
    return {};
}

}  // namespace

reload_result load_for_reload(const config::config& running) {
    std::shared_ptr<const config::config> loaded;
    try {
        loaded = config::load_file(running.source);
    } catch (const config::config_error& e) {
        return {false, e.what(), nullptr, {}};
    }
    if (auto why = truncated(*loaded, running); !why.empty()) return {false, running.source + ": " + why, nullptr, {}};
    auto next = std::make_shared<config::config>(*loaded);
    std::vector<std::string> changed;
    keep(next->server.listen, running.server.listen, "server.listen", changed);
    keep(next->server.threads, running.server.threads, "server.threads", changed);
    keep(next->server.max_connections, running.server.max_connections, "server.max_connections", changed);
    keep(next->admin.listen, running.admin.listen, "admin.listen", changed);
    keep(next->upstream.url, running.upstream.url, "upstream.url", changed);
    keep(next->upstream.max_idle_per_worker, running.upstream.max_idle_per_worker, "upstream.max_idle_per_worker",
         changed);
    keep(next->log.access_path, running.log.access_path, "log.access.path", changed);
    // The store is built once at start; store.on_error is read per request and applies at once,
    // except to or from local, which builds a different store.
    auto& st = next->store;
    const auto& was = running.store;
    using failure_mode = config::store_config::failure_mode;
    if ((st.on_error == failure_mode::local) != (was.on_error == failure_mode::local))
        keep(st.on_error, was.on_error, "store.on_error", changed);
    keep(st.fleet_size, was.fleet_size, "store.fleet_size", changed);
    keep(st.type, was.type, "store.type", changed);
    keep(st.memory_max_keys, was.memory_max_keys, "store.memory.max_keys", changed);
    keep(st.redis_nodes, was.redis_nodes, "store.redis.nodes", changed);
    keep(st.redis_password_env, was.redis_password_env, "store.redis.password_env", changed);
    keep(st.redis_username, was.redis_username, "store.redis.username", changed);
    keep(st.redis_database, was.redis_database, "store.redis.database", changed);
    keep(st.redis_timeout, was.redis_timeout, "store.redis.timeout", changed);
    keep(st.redis_start_timeout, was.redis_start_timeout, "store.redis.start_timeout", changed);
    keep(st.redis_key_prefix, was.redis_key_prefix, "store.redis.key_prefix", changed);
    keep(st.redis_tls, was.redis_tls, "store.redis.tls", changed);
    keep(st.redis_sentinel, was.redis_sentinel, "store.redis.sentinel", changed);
    keep(st.hash_secret_env, was.hash_secret_env, "store.hash_secret_env", changed);
    return {true, "reloaded " + running.source, next, std::move(changed)};
}

}  // namespace sluice::app
