// upstream and upstreams: pools of upstream servers. One reader for a pool serves both the
// `upstream:` block (the pool "default") and each entry of `upstreams:`; once routes are
// read, every route's pool must exist.
#include <algorithm>
#include <charconv>

#include "config/readers.hpp"

namespace sluice::config::detail {

namespace {

constexpr std::size_t max_pool_name = 64;
constexpr std::string_view bad_pool_name = "a pool name may only use a-z, 0-9, _ and -, at most 64 characters";
constexpr std::string_view url_and_servers = "give either url or servers, not both";
constexpr std::string_view bad_status = "expected a status like 200, a class like 5xx, or a list of them";
constexpr std::string_view bad_percentage = R"(expected a percentage like "20%")";
constexpr std::string_view bad_health_path = "expected a path starting with /, like /healthz";

// upstream.tls. A file's contents are checked where the TLS context is built: its position
// goes with it.
upstream_tls_config read_upstream_tls(const node_ref& n) {
    upstream_tls_config tls;
    auto file = [](std::string& path, std::string& at) {
        return [&](const node_ref& v) {
            path = read_readable_file(v);
            at = v.where();
        };
    };
    read_mapping(n, {
                        {"ca_file", file(tls.ca_file, tls.ca_file_at)},
                        {"server_name", [&](const node_ref& v) { tls.server_name = read_string(v); }},
                        {"cert_file", file(tls.cert_file, tls.cert_file_at)},
                        {"key_file", file(tls.key_file, tls.key_file_at)},
                        {"verify", [&](const node_ref& v) { tls.verify = schema::read_bool(v); }},
                    });
    if (tls.cert_file.empty() != tls.key_file.empty()) {
        const char* missing = tls.cert_file.empty() ? "cert_file" : "key_file";
        n.fail_at(n.mark(), n.path_of(missing), "required with a client certificate (give cert_file and key_file)");
    }
    return tls;
}

// An item of `servers`: {url, weight}, or a url alone.
upstream_server_config read_pool_server(const node_ref& n) {
    upstream_server_config s;
    s.at = n.where();
    if (n.node().IsScalar()) {
        s.url = read_upstream_url(n);
        return s;
    }
    read_mapping(n, {
                        {"url", [&](const node_ref& v) { s.url = read_upstream_url(v); }, presence::required},
                        {"weight", [&](const node_ref& v) { s.weight = schema::read_uint_as(v, 1u, 1000u); }},
                    });
    return s;
}

std::vector<upstream_server_config> read_pool_servers(const node_ref& v) {
    std::vector<upstream_server_config> out;
    read_list(v, empty_list::refused, [&](const node_ref& item) {
        auto s = read_pool_server(item);
        const bool twice =
            std::any_of(out.begin(), out.end(), [&](const upstream_server_config& o) { return o.url == s.url; });
        if (twice) item.fail(listed_twice);
        out.push_back(std::move(s));
    });
    return out;
}

// 200 (one status) or 5xx (a class, 2xx to 5xx).
std::pair<unsigned, unsigned> read_status_item(const node_ref& v) {
    const std::string& s = v.scalar(bad_status);
    if (s.size() == 3 && s[0] >= '2' && s[0] <= '5' && s[1] == 'x' && s[2] == 'x') {
        const unsigned first = static_cast<unsigned>(s[0] - '0') * 100;
        return {first, first + 99};
    }
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) v.fail(bad_status);
    const unsigned status = schema::read_uint_as(v, 100u, 599u);
    return {status, status};
}

// "20%", or 20.
unsigned read_percentage(const node_ref& v) {
    std::string_view s = v.scalar(bad_percentage);
    if (s.ends_with('%')) s.remove_suffix(1);
    unsigned n = 0;
    const char* end = s.data() + s.size();
    auto [ptr, ec] = std::from_chars(s.data(), end, n);
    if (s.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) v.fail(bad_percentage);
    if (ec != std::errc() || n > 100) v.fail("must be between 0% and 100%");
    return n;
}

bool is_health_path(std::string_view s) {
    return s.starts_with('/') && std::none_of(s.begin(), s.end(), [](char c) {
               return static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '#';
           });
}

void read_passive(const node_ref& n, upstream_health_config& h) {
    read_mapping(n, {
                        {"eject_after", [&](const node_ref& v) { h.eject_after = schema::read_uint_as(v, 0u, 1000u); }},
                        {"eject_for", [&](const node_ref& v) { h.eject_for = read_duration(v, zero::refused); }},
                        {"max_ejected_percent",
                         [&](const node_ref& v) { h.max_ejected_percent = schema::read_uint_as(v, 0u, 100u); }},
                    });
}

upstream_health_config read_health(const node_ref& n) {
    upstream_health_config h;
    std::optional<node_ref> interval, timeout;
    read_mapping(n, {
                        {"path", [&](const node_ref& v) { h.path = read_checked(v, is_health_path, bad_health_path); }},
                        {"interval",
                         [&](const node_ref& v) {
                             h.interval = read_duration(v, zero::refused);
                             interval = v;
                         }},
                        {"timeout",
                         [&](const node_ref& v) {
                             h.timeout = read_duration(v, zero::refused);
                             timeout = v;
                         }},
                        {"healthy", [&](const node_ref& v) { h.healthy = schema::read_uint_as(v, 1u, 100u); }},
                        {"unhealthy", [&](const node_ref& v) { h.unhealthy = schema::read_uint_as(v, 1u, 100u); }},
                        {"expect_status", [&](const node_ref& v) { h.expect_status = read_status_set(v); }},
                        {"passive", [&](const node_ref& v) { read_passive(v, h); }},
                    });
    // A check outlasting its interval would overlap the next one.
    if (h.timeout > h.interval) {
        if (timeout) timeout->fail("must not exceed interval (" + format_duration(h.interval) + ")");
        interval->fail("must be at least timeout (" + format_duration(h.timeout) + ")");
    }
    return h;
}

upstream_queue_config read_queue(const node_ref& n, std::optional<node_ref>& size_at) {
    upstream_queue_config q;
    read_mapping(n, {
                        {"size",
                         [&](const node_ref& v) {
                             q.size = schema::read_uint_as<std::size_t>(v, 0, 100'000);
                             size_at = v;
                         }},
                        {"timeout", [&](const node_ref& v) { q.timeout = read_duration(v, zero::refused); }},
                    });
    return q;
}

// A pool: `upstream:` (named "default") or `upstreams.<name>`.
upstream_config read_pool(const node_ref& n, const std::string& name) {
    upstream_config out;
    out.name = name;
    out.at = n.where();
    std::optional<node_ref> url, servers, tls, queue_size;
    read_mapping(
        n, {
               {"url",
                [&](const node_ref& v) {
                    if (servers) v.fail_at_key(url_and_servers);
                    out.url = read_upstream_url(v);
                    out.servers = {{out.url, 1, v.where()}};
                    url = v;
                }},
               {"servers",
                [&](const node_ref& v) {
                    if (url) v.fail_at_key(url_and_servers);
                    out.servers = read_pool_servers(v);
                    servers = v;
                }},
               {"balance",
                [&](const node_ref& v) {
                    out.balance = read_enum<balance_kind>(v, {"round_robin", "least_request", "hash"});
                }},
               {"resolve_every", [&](const node_ref& v) { out.resolve_every = read_duration(v, zero::refused); }},
               {"connect_timeout", [&](const node_ref& v) { out.connect_timeout = read_duration(v, zero::refused); }},
               {"timeout", [&](const node_ref& v) { out.timeout = read_duration(v, zero::refused); }},
               {"max_idle_per_worker",
                [&](const node_ref& v) { out.max_idle_per_worker = schema::read_uint_as<std::size_t>(v, 0, 100'000); }},
               {"tls",
                [&](const node_ref& v) {
                    out.tls = read_upstream_tls(v);
                    tls = v;
                }},
               {"health", [&](const node_ref& v) { out.health = read_health(v); }},
               {"slow_start", [&](const node_ref& v) { out.slow_start = read_duration(v, zero::allowed); }},
               {"retries", [&](const node_ref& v) { out.retries = schema::read_uint_as(v, 0u, 10u); }},
               {"retry_budget", [&](const node_ref& v) { out.retry_budget_percent = read_percentage(v); }},
               {"max_in_flight",
                // A concurrency tier's bound: every request in flight is one entry in the pool's state.
                [&](const node_ref& v) { out.max_in_flight = schema::read_uint_as<std::int64_t>(v, 0, 1000); }},
               {"max_in_flight_lease",
                [&](const node_ref& v) {
                    out.max_in_flight_lease = read_duration(v, zero::refused);
                    if (out.max_in_flight_lease < std::chrono::seconds(3) ||
                        out.max_in_flight_lease > std::chrono::hours(1))
                        v.fail(bad_lease);
                }},
               {"queue", [&](const node_ref& v) { out.queue = read_queue(v, queue_size); }},
           });
    if (!url && !servers) n.fail_at(n.mark(), n.path_of("url"), "required key is missing (give url or servers)");
    out.url = out.servers.front().url;
    const bool any_https =
        std::any_of(out.servers.begin(), out.servers.end(), [](const upstream_server_config& s) { return s.url.tls; });
    if (tls && !any_https) tls->fail_at_key(tls_needs_https);
    if (out.queue.size > 0 && out.max_in_flight == 0)
        queue_size->fail("needs max_in_flight (a queue holds requests waiting for a slot under that cap)");
    return out;
}

bool has_pool(const std::vector<upstream_config>& pools, std::string_view name) {
    return std::any_of(pools.begin(), pools.end(), [&](const upstream_config& p) { return p.name == name; });
}

}  // namespace

status_set read_status_set(const node_ref& v) {
    status_set out;
    if (v.node().IsScalar()) {
        out.ranges.push_back(read_status_item(v));
        return out;
    }
    if (v.node().IsMap()) v.fail(bad_status);
    read_list(v, empty_list::refused, [&](const node_ref& item) { out.ranges.push_back(read_status_item(item)); });
    return out;
}

void read_upstream(const node_ref& n, std::vector<upstream_config>& pools) {
    if (has_pool(pools, "default"))
        n.fail_at_key("upstreams.default is given already: the upstream: block is the pool \"default\"");
    pools.insert(pools.begin(), read_pool(n, "default"));
}

void read_upstreams(const node_ref& n, std::vector<upstream_config>& pools) {
    read_entries(n, [&](const std::string& name, const node_ref& v) {
        if (!is_policy_name(name) || name.size() > max_pool_name) v.fail_at_key(bad_pool_name);
        if (name == "default" && has_pool(pools, name))
            v.fail_at_key("the upstream: block is the pool \"default\" already");
        pools.push_back(read_pool(v, name));
    });
}

void check_upstreams(const node_ref& root, const config& c, const std::vector<route_nodes>& at) {
    if (c.upstreams.empty()) root.fail_at(root.mark(), "upstream", "required key is missing");
    const bool has_default = c.find_upstream("default") != nullptr;
    for (std::size_t i = 0; i < c.routes.size(); ++i) {
        const route_config& r = c.routes[i];
        if (at[i].upstream) {
            if (c.find_upstream(r.upstream) == nullptr)
                at[i].upstream->fail("no upstream named \"" + r.upstream + "\"");
        } else if (!has_default) {
            at[i].route->fail(
                "names no upstream, and there is no pool \"default\": name one of upstreams (upstream: NAME), or "
                "add an upstream: block");
        }
    }
}

}  // namespace sluice::config::detail
