// Internal to src/config: what the pieces of the loader share. Each piece includes this
// header, never a sibling's.
//
// The scalar parsers (scalars.cpp) return a value or the reason it was refused; the typed
// readers (readers.cpp) turn that reason into a config_error at the value's position; the
// section readers (sections.cpp, upstreams.cpp, store.cpp, clients.cpp, limits.cpp, routes.cpp,
// service.cpp) read one part of the file each; load.cpp reads the whole file and runs the
// checks across sections.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.hpp"
#include "config/yaml_schema.hpp"

namespace sluice::config::detail {

using schema::field;
using schema::node_ref;
using schema::presence;
using schema::read_mapping;

// Reasons, in one place so that the wording stays consistent: "expected ..." when the
// value has the wrong shape, "must ..." when it has the right shape but a bad value.
inline constexpr std::string_view bad_duration = "expected a duration like 250ms, 1s, 5m, 1h, 1d";
inline constexpr std::string_view duration_too_large = "duration is too large (at most 87600h, ten years)";
inline constexpr std::string_view not_positive = "must be greater than 0";
inline constexpr std::string_view bad_size = "expected a size like 16384, 64KiB, 10MiB, 1GiB";
inline constexpr std::string_view ambiguous_size_unit = "ambiguous unit, use KiB, MiB or GiB";
inline constexpr std::string_view size_too_large = "size is too large";
inline constexpr std::string_view bad_address = R"(expected an address like "0.0.0.0:8080" or "[::1]:8080")";
inline constexpr std::string_view ipv6_needs_brackets = R"(an IPv6 address must be in brackets, like "[::1]:8080")";
inline constexpr std::string_view host_not_ip = "host must be an IP address";
inline constexpr std::string_view listen_port_range = "port must be between 0 and 65535";
inline constexpr std::string_view bad_url = "expected a url like http://127.0.0.1:3000";
inline constexpr std::string_view not_http_url = "url scheme must be http or https";
inline constexpr std::string_view tls_needs_https = "applies to an https:// upstream url only";
inline constexpr std::string_view url_userinfo = "url must not contain userinfo";
inline constexpr std::string_view url_query = "url must not contain a query";
inline constexpr std::string_view url_fragment = "url must not contain a fragment";
inline constexpr std::string_view url_host = "url host must be an IP address or a DNS name";
inline constexpr std::string_view url_port_range = "port must be between 1 and 65535";
inline constexpr std::string_view expected_single_document = "expected a single document";
inline constexpr std::string_view bad_host_port = R"(expected host:port like "redis:6379" or "[::1]:6379")";
inline constexpr std::string_view host_port_needs_brackets =
    R"(an IPv6 address must be in brackets, like "[::1]:6379")";
inline constexpr std::string_view bad_cidr =
    R"(expected an IP network like "10.0.0.0/8" or "::1/128", or an IP address)";
inline constexpr std::string_view expected_string = "expected a string";
inline constexpr std::string_view must_not_be_empty = "must not be empty";
inline constexpr std::string_view listed_twice = "listed twice";
inline constexpr std::string_view bad_env_name = "expected an environment variable name like SLUICE_HASH_SECRET";
inline constexpr std::string_view bad_header_name = "expected a header name like X-API-Key";
inline constexpr std::string_view bad_user_name = "expected a name of 1 to 128 letters, digits, '.', '_', '@' or '-'";
inline constexpr std::string_view bad_plan_name = "expected a name of lower-case letters, digits, '_' or '-'";
inline constexpr std::string_view api_keys_need_header =
    "needs clients.user.api_key_header (the header the key comes in)";
inline constexpr std::string_view bad_key_prefix =
    "must not contain blanks or braces (braces mark the Redis Cluster hash tag)";
inline constexpr std::string_view key_prefix_too_long = "must be at most 64 characters";
inline constexpr std::string_view jwt_alg_none = "alg none is never accepted";
inline constexpr std::string_view local_needs_shared_store =
    "local needs a shared store to fall back from (store.type redis or redis-cluster)";
inline constexpr std::string_view jwt_needs_secret = "required when HS256, HS384 or HS512 is listed in algorithms";
inline constexpr std::string_view jwt_needs_public_key = "required when RS256 or ES256 is listed in algorithms";
inline constexpr std::string_view leeway_too_large = "must be at most 10m";
inline constexpr std::string_view bad_policy_name = "a policy name may only use a-z, 0-9, _ and -";
inline constexpr std::string_view reserved_policy_name = R"("none" is reserved: a route uses it for no limit)";
inline constexpr std::string_view bad_offset = "expected a duration like -5h or 30m";
inline constexpr std::string_view month_fixed_only = "per: month is for algorithm: fixed (calendar windows)";
inline constexpr std::string_view offset_fixed_only = "window_offset is for algorithm: fixed";
inline constexpr std::string_view concurrency_takes_lease_only =
    "a concurrency tier takes lease only (it counts requests in flight, not requests per window)";
inline constexpr std::string_view lease_needs_concurrency = "lease applies to concurrency tiers only";
inline constexpr std::string_view bad_lease = "must be between 3s and 1h";
inline constexpr std::string_view concurrency_too_large =
    "must be at most 1000 (each request in flight is one entry in the identifier's state)";
inline constexpr std::string_view count_rejected_with_log =
    "count_rejected cannot apply to log tiers (a log would keep every refused request)";
inline constexpr std::string_view cost_header_needs_max_cost =
    "cost_header needs max_cost (the most one request may be charged)";
inline constexpr std::string_view max_cost_needs_cost_header = "max_cost applies with cost_header only";
inline constexpr std::string_view cost_header_needs_policy = "cost_header needs a route with a policy (not none)";
inline constexpr std::string_view charge_needs_policy = "charge needs a route with a policy (not none)";
inline constexpr std::string_view charge_needs_a_rule = "expected on_status, refund_on or both";
inline constexpr std::string_view charge_never =
    "refunds every status on_status charges: no request would ever be charged";
inline constexpr std::string_view plan_needs_user_source =
    "plans apply to users: set clients.user.api_key_header or clients.user.jwt";
inline constexpr std::string_view cost_header_framing =
    "must not be a field that frames the message (it is never relayed)";
inline constexpr std::string_view policy_without_tiers =
    "policy has no tiers, expected ip, user, route, header:<name>, claim:<name> or query:<name>";
inline constexpr std::string_view kind_without_tiers = "expected a list of at least one tier";
inline constexpr std::string_view too_many_kinds =
    "a policy limits by at most 8 kinds, ip and user included (one store request carries them all)";
inline constexpr std::string_view claim_needs_jwt =
    "claim:<name> needs clients.user.jwt (claims are read from the verified token)";
inline constexpr std::string_view ip_never_missing = "a request always has an address: ip is never missing";
inline constexpr std::string_view max_values_unbounded_kind =
    "applies to kinds whose values the caller chooses (not ip, user or route: store.memory.max_keys bounds them)";
inline constexpr std::string_view plan_without_tiers = "plan has no tiers, expected user: [ ... ]";
inline constexpr std::string_view plan_policy_needs_plans = "user: plan needs plans (plans.<name>.user)";
inline constexpr std::string_view per_too_large = "must be at most 8784h (366 days)";
inline constexpr std::string_view precision_sliding_only = "precision applies to the sliding algorithm only";
inline constexpr std::string_view burst_gcra_only = "burst applies to the gcra algorithm only";
inline constexpr std::string_view no_default_precision =
    "the default precision, per / 10, is not a whole number of milliseconds: set precision";
inline constexpr std::string_view log_limit_too_large = "must be at most 1000 with the log algorithm";
inline constexpr std::string_view gcra_tolerance_too_large = "burst * per / limit must be at most 8784h";
inline constexpr std::string_view bad_route_path = "expected a path starting with /, without query or fragment";
inline constexpr std::string_view path_and_path_prefix = "set only one of path and path_prefix";
inline constexpr std::string_view route_needs_path = "expected path or path_prefix";
inline constexpr std::string_view bad_method = "expected an HTTP method like GET";
inline constexpr std::string_view bad_route_host = "expected a host name like api.example.com";
inline constexpr std::string_view expected_policy_name = "expected a policy name";
inline constexpr std::string_view admin_needs_token =
    "an address other than loopback needs admin.token_file: without a token anyone who reaches it could reset "
    "counters, block callers and reload";
inline constexpr std::string_view bad_admin_token =
    "the file must hold one bearer token of 16 to 4096 characters: letters, digits, '-', '.', '_', '~', '+', '/', "
    "then any '=' (blanks and line ends around it are trimmed)";

// A limit, burst or cost is at most this: limiter arithmetic (integer microseconds) stays
// far from overflow.
inline constexpr std::int64_t max_count = 1'000'000'000;

// A reason composed at run time ("... did you mean 10.0.0.0/8?").
struct reason_text {
    std::string text;
};

// A parsed value, or the reason why not.
template <class T>
struct parsed {
    parsed(T v) : value(std::move(v)) {}
    parsed(std::string_view why) : reason(why) {}
    parsed(reason_text why) : reason(std::move(why.text)) {}
    std::optional<T> value;
    std::string reason;
};

// --- scalars.cpp: text to value ---

parsed<duration> parse_duration_why(std::string_view s);
parsed<std::uint64_t> parse_size_why(std::string_view s);
parsed<address> parse_address_why(std::string_view s);
parsed<upstream_url> parse_upstream_url_why(std::string_view s);
parsed<host_port> parse_host_port_why(std::string_view s);
parsed<cidr> parse_cidr_why(std::string_view s);

bool is_dns_name(std::string_view host);
bool is_token(std::string_view s);  // an RFC 9110 token: header field names and request methods
bool is_env_name(std::string_view s);
bool is_user_name(std::string_view s);
bool is_policy_name(std::string_view s);  // also plan names
bool is_route_path(std::string_view s);
bool is_key_prefix(std::string_view s);
bool is_loopback(std::string_view host);   // 127.0.0.0/8 or ::1
bool is_bearer_token(std::string_view s);  // RFC 6750 b64token, 16 to 4096 characters
std::string to_lower(std::string s);
std::string to_upper(std::string s);

// --- readers.cpp: a typed value from a node, or a config_error at its position ---

template <class T>
T take(const node_ref& v, parsed<T> p) {
    if (!p.value) v.fail(p.reason);
    return std::move(*p.value);
}

enum class zero { allowed, refused };
enum class empty_list { allowed, refused };

duration read_duration(const node_ref& v, zero z);
std::uint64_t read_size(const node_ref& v, std::uint64_t min, std::uint64_t max);
address read_address(const node_ref& v);
upstream_url read_upstream_url(const node_ref& v);
host_port read_host_port(const node_ref& v);
std::vector<host_port> read_host_ports(const node_ref& v);  // non-empty
std::vector<cidr> read_cidrs(const node_ref& v);
cidr read_cidr(const node_ref& v);
std::int64_t read_count(const node_ref& v);  // a limit, burst or cost: 1 to max_count
// A string that must not be empty.
std::string read_string(const node_ref& v);
// A string that `valid` accepts; `expected` says what it should look like.
std::string read_checked(const node_ref& v, bool (*valid)(std::string_view), std::string_view expected);
std::string read_env_name(const node_ref& v);
// A file the gateway will open at start: it must be readable now (config load, --check).
std::string read_readable_file(const node_ref& v);
void read_list(const node_ref& v, empty_list empty, const std::function<void(const node_ref&)>& read_item);
// A non-empty list of distinct strings, each read by `read_item`.
std::vector<std::string> read_distinct(const node_ref& v, std::string (*read_item)(const node_ref&));

// One of `names`, as the enumerator at the same position: list them in declaration order.
template <class E>
E read_enum(const node_ref& v, std::initializer_list<std::string_view> names) {
    return static_cast<E>(schema::read_choice_index(v, names));
}

// --- the sections, one file each (or a few small ones together) ---

// sections.cpp
void read_server(const node_ref& n, server_config& out);
// tls.cpp
tls_config read_tls(const node_ref& n);
std::string read_ca_file(const node_ref& v, std::string& path);  // the PEM text; `path` as written
// Across sections: clients.user.certificate needs client certificates; warnings for route
// hosts no certificate covers (config::warnings).
void check_tls(config& c);
void read_admin(const node_ref& n, admin_config& out);
void read_proxy(const node_ref& n, proxy_config& out);
void read_log(const node_ref& n, log_config& out);
void read_response(const node_ref& n, response_config& out);

// store.cpp
void read_store(const node_ref& n, store_config& out);

// clients.cpp
void read_clients(const node_ref& n, clients_config& out);

// limits.cpp
void read_plans(const node_ref& n, std::vector<plan_config>& out);
void read_policies(const node_ref& n, std::vector<policy_config>& out);
// Every plan a registry entry, clients.user.default_plan or a policy names must exist;
// checked once all are read, as plans may come after them in the file.
void check_plans(const config& c);

// A list of tiers of `kind` (as a policy's: any algorithm; two that would count in one place
// refused).
std::vector<tier_config> read_tier_list(const node_ref& v, const std::string& kind);

// service.cpp
void read_service(const node_ref& n, service_config& out);

// routes.cpp
// Where a route names its policy, cost and pool: checked once every policy and pool is known.
struct route_nodes {
    std::optional<node_ref> route, policy, cost, cost_header, max_cost, upstream, charge;
};
void read_routes(const node_ref& n, std::vector<route_config>& out, std::vector<route_nodes>& at);
void check_routes(const config& c, const std::vector<route_nodes>& at);

// upstreams.cpp
// A status (200), a class ("5xx") or a non-empty list of them.
status_set read_status_set(const node_ref& v);
// The upstream: block, the pool "default", first in `pools`.
void read_upstream(const node_ref& n, std::vector<upstream_config>& pools);
// upstreams.<name>, in file order after any pool read before.
void read_upstreams(const node_ref& n, std::vector<upstream_config>& pools);
// Once routes are read: some pool exists, each route's pool exists (a route that names
// none needs the pool "default").
void check_upstreams(const node_ref& root, const config& c, const std::vector<route_nodes>& at);

// load.cpp
// The single document of `text`; an empty text is an empty (null) document.
YAML::Node parse_document(const std::string& text, const std::string& name);

// --- restart-only keys ---

// Puts the running value of config.*section.*member back into `next`; true when the file
// had changed it.
template <auto section, auto member>
bool keep_running(config& next, const config& running) {
    auto& value = next.*section.*member;
    const auto& was = running.*section.*member;
    if (value == was) return false;
    value = was;
    return true;
}

// The restart_only of a field whose value is taken only at start:
// {"listen", read, presence::optional, restart_only<&config::server, &server_config::listen>}.
template <auto section, auto member>
inline constexpr schema::keep_fn restart_only = keep_running<section, member>;

}  // namespace sluice::config::detail
