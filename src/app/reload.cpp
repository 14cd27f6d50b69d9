#include "app/reload.hpp"

namespace sluice::app {

namespace {

bool same(const config::address& a, const config::address& b) { return a.host == b.host && a.port == b.port; }

bool same(const config::store_config& a, const config::store_config& b) {
    auto nodes_equal = [&] {
        if (a.redis_nodes.size() != b.redis_nodes.size()) return false;
        for (std::size_t i = 0; i < a.redis_nodes.size(); ++i)
            if (a.redis_nodes[i].host != b.redis_nodes[i].host || a.redis_nodes[i].port != b.redis_nodes[i].port)
                return false;
        return true;
    };
    return a.type == b.type && a.memory_max_keys == b.memory_max_keys && nodes_equal() &&
           a.redis_password_env == b.redis_password_env && a.redis_username == b.redis_username &&
           a.redis_database == b.redis_database && a.redis_timeout == b.redis_timeout &&
           a.redis_key_prefix == b.redis_key_prefix && a.hash_secret_env == b.hash_secret_env;
}

// Keeps the running value of a start-only setting, noting the key if the file changed it.
template <class T, class Same>
void keep(T& next, const T& running, const char* key, Same&& equal, std::vector<std::string>& changed) {
    if (!equal(next, running)) changed.emplace_back(key);
    next = running;
}

}  // namespace

reload_result load_for_reload(const config::config& running) {
    std::shared_ptr<const config::config> loaded;
    try {
        loaded = config::load_file(running.source);
    } catch (const config::config_error& e) {
        return {false, e.what(), nullptr, {}};
    }
    auto next = std::make_shared<config::config>(*loaded);
    std::vector<std::string> changed;
    auto eq = [](const auto& a, const auto& b) { return a == b; };
    auto eq_addr = [](const config::address& a, const config::address& b) { return same(a, b); };
    keep(next->server.listen, running.server.listen, "server.listen", eq_addr, changed);
    keep(next->server.threads, running.server.threads, "server.threads", eq, changed);
    keep(next->server.max_connections, running.server.max_connections, "server.max_connections", eq, changed);
    keep(next->admin.listen, running.admin.listen, "admin.listen", eq_addr, changed);
    keep(next->upstream.url, running.upstream.url, "upstream.url",
         [](const config::upstream_url& a, const config::upstream_url& b) {
             return a.host == b.host && a.port == b.port && a.base_path == b.base_path;
         },
         changed);
    keep(next->upstream.max_idle_per_worker, running.upstream.max_idle_per_worker, "upstream.max_idle_per_worker", eq,
         changed);
    keep(next->log.access_path, running.log.access_path, "log.access.path", eq, changed);
    keep(next->store, running.store, "store",
         [](const config::store_config& a, const config::store_config& b) { return same(a, b); }, changed);
    return {true, "reloaded " + running.source, next, std::move(changed)};
}

}  // namespace sluice::app
