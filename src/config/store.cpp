// store: memory, or Redis (one node, a Sentinel-managed primary, a Cluster), over TLS or not,
// and what to do when it cannot answer.
#include "config/readers.hpp"

namespace sluice::config::detail {

namespace {

constexpr std::size_t max_key_prefix = 64;

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
                }},
               {"tls", [&](const node_ref& v) { out.redis_tls = read_redis_tls(v); }},
               {"sentinel",
                [&](const node_ref& v) {
                    out.redis_sentinel = read_redis_sentinel(v);
                    sentinel = v;
                }},
               {"password_env", [&](const node_ref& v) { out.redis_password_env = read_env_name(v); }},
               {"username", [&](const node_ref& v) { out.redis_username = read_string(v); }},
               {"database", [&](const node_ref& v) { out.redis_database = schema::read_uint_as(v, 0u, 15u); }},
               {"timeout", [&](const node_ref& v) { out.redis_timeout = read_duration(v, zero::refused); }},
               {"start_timeout", [&](const node_ref& v) { out.redis_start_timeout = read_duration(v, zero::allowed); }},
               {"key_prefix", [&](const node_ref& v) { out.redis_key_prefix = read_key_prefix(v); }},
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
                         }},
                        {"memory",
                         [&](const node_ref& m) {
                             read_mapping(m, {{"max_keys", [&](const node_ref& v) {
                                                   out.memory_max_keys =
                                                       schema::read_uint_as<std::size_t>(v, 1, 1'000'000'000);
                                               }}});
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
                         }},
                        {"fleet_size", [&](const node_ref& v) { out.fleet_size = read_fleet_size(v); }},
                        {"hash_secret_env", [&](const node_ref& v) { out.hash_secret_env = read_env_name(v); }},
                    });
    if (on_error && out.on_error == failure_mode::local && out.type == kind::memory)
        on_error->fail(local_needs_shared_store);
    if (redis && out.redis_sentinel && out.type == kind::redis_cluster)
        redis->fail("sentinel is for store.type redis; a cluster is found through its nodes (seeds)");
}

}  // namespace sluice::config::detail
