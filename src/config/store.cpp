// store: memory, or Redis (one node, a Sentinel-managed primary, a Cluster), over TLS or not,
// and what to do when it cannot answer. The store is built once at start: most of its keys
// are restart-only.
#include "config/readers.hpp"

namespace sluice::config::detail {

namespace {

constexpr std::size_t max_key_prefix = 64;

// store.on_error is read per request and applies at once, except to or from local, which
// builds a different store.
bool keep_local_fallback(config& next, const config& running) {
    using failure_mode = store_config::failure_mode;
    if ((next.store.on_error == failure_mode::local) == (running.store.on_error == failure_mode::local)) return false;
    return keep_running<&config::store, &store_config::on_error>(next, running);
}

// Every key below store but on_error: the store is built once, at start.
template <auto member>
inline constexpr schema::keep_fn restart = restart_only<&config::store, member>;
constexpr presence optional = presence::optional;

std::string read_key_prefix(const node_ref& v) {
    std::string s = read_string(v);
    if (!is_key_prefix(s)) v.fail(bad_key_prefix);
    if (s.size() > max_key_prefix) v.fail(key_prefix_too_long);
    return s;
}

redis_tls_config read_redis_tls(const node_ref& n) {
    redis_tls_config tls;
    read_mapping(n,
                 {
                     {"ca_file", [&](const node_ref& v) { tls.ca_file = read_readable_file(v); }, presence::required},
                     {"cert_file", [&](const node_ref& v) { tls.cert_file = read_readable_file(v); }},
                     {"key_file", [&](const node_ref& v) { tls.key_file = read_readable_file(v); }},
                     {"server_name", [&](const node_ref& v) { tls.server_name = read_string(v); }},
                 });
    if (tls.cert_file.empty() != tls.key_file.empty()) {
        const char* missing = tls.cert_file.empty() ? "cert_file" : "key_file";
        n.fail_at(n.mark(), n.path_of(missing), "required with a client certificate (give cert_file and key_file)");
    }
    return tls;
}

redis_sentinel_config read_redis_sentinel(const node_ref& n) {
    redis_sentinel_config s;
    read_mapping(n, {
                        {"master", [&](const node_ref& v) { s.master = read_string(v); }, presence::required},
                        {"nodes", [&](const node_ref& v) { s.nodes = read_host_ports(v); }, presence::required},
                    });
    return s;
}

void read_redis(const node_ref& n, store_config& out) {
    std::optional<node_ref> nodes, sentinel;
    read_mapping(
        n, {
               {"nodes",
                [&](const node_ref& v) {
                    out.redis_nodes = read_host_ports(v);
                    nodes = v;
                },
                optional, restart<&store_config::redis_nodes>},
               {"tls", [&](const node_ref& v) { out.redis_tls = read_redis_tls(v); }, optional,
                restart<&store_config::redis_tls>},
               {"sentinel",
                [&](const node_ref& v) {
                    out.redis_sentinel = read_redis_sentinel(v);
                    sentinel = v;
                },
                optional, restart<&store_config::redis_sentinel>},
               {"password_env", [&](const node_ref& v) { out.redis_password_env = read_env_name(v); }, optional,
                restart<&store_config::redis_password_env>},
               {"username", [&](const node_ref& v) { out.redis_username = read_string(v); }, optional,
                restart<&store_config::redis_username>},
               {"database", [&](const node_ref& v) { out.redis_database = schema::read_uint_as(v, 0u, 15u); }, optional,
                restart<&store_config::redis_database>},
               {"timeout", [&](const node_ref& v) { out.redis_timeout = read_duration(v, zero::refused); }, optional,
                restart<&store_config::redis_timeout>},
               {"start_timeout", [&](const node_ref& v) { out.redis_start_timeout = read_duration(v, zero::allowed); },
                optional, restart<&store_config::redis_start_timeout>},
               {"key_prefix", [&](const node_ref& v) { out.redis_key_prefix = read_key_prefix(v); }, optional,
                restart<&store_config::redis_key_prefix>},
           });
    if (nodes && sentinel)
        sentinel->fail_at_key(
            "give either nodes or sentinel, not both (with sentinel, the sentinels name the primary)");
}

std::uint32_t read_fleet_size(const node_ref& v) { return schema::read_uint_as<std::uint32_t>(v, 1, 100'000); }

}  // namespace

void read_store(const node_ref& n, store_config& out) {
    using kind = store_config::kind;
    using failure_mode = store_config::failure_mode;
    std::optional<node_ref> on_error, redis;  // checked once the whole section is read: store.type may follow
    read_mapping(n, {
                        {"type",
                         [&](const node_ref& v) {
                             out.type = read_enum<kind>(v, {"memory", "redis", "redis-cluster"});
                         },
                         optional, restart<&store_config::type>},
                        {"memory",
                         [&](const node_ref& m) {
                             read_mapping(m, {{"max_keys",
                                               [&](const node_ref& v) {
                                                   out.memory_max_keys =
                                                       schema::read_uint_as<std::size_t>(v, 1, 1'000'000'000);
                                               },
                                               optional, restart<&store_config::memory_max_keys>}});
                         }},
                        {"redis",
                         [&](const node_ref& v) {
                             read_redis(v, out);
                             redis.emplace(v);
                         }},
                        {"on_error",
                         [&](const node_ref& v) {
                             out.on_error = read_enum<failure_mode>(v, {"allow", "deny", "local"});
                             on_error.emplace(v);
                         },
                         optional, keep_local_fallback},
                        {"fleet_size", [&](const node_ref& v) { out.fleet_size = read_fleet_size(v); }, optional,
                         restart<&store_config::fleet_size>},
                        {"hash_secret_env", [&](const node_ref& v) { out.hash_secret_env = read_env_name(v); },
                         optional, restart<&store_config::hash_secret_env>},
                    });
    if (on_error && out.on_error == failure_mode::local && out.type == kind::memory)
        on_error->fail(local_needs_shared_store);
    if (redis && out.redis_sentinel && out.type == kind::redis_cluster)
        redis->fail("sentinel is for store.type redis; a cluster is found through its nodes (seeds)");
}

}  // namespace sluice::config::detail
