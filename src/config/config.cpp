// Loading and validating the Sluice config. The scalar parsers below return a value or
// the reason it was refused; the YAML readers turn that reason into a config_error at the
// value's position, and the public parse_* functions drop it.
#include "config/config.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>
#include <boost/asio/ip/network_v4.hpp>
#include <boost/asio/ip/network_v6.hpp>
#include <boost/url/parse.hpp>

#include "config/stable_file.hpp"
#include "config/yaml_schema.hpp"

namespace sluice::config {

namespace {

using schema::field;
using schema::node_ref;
using schema::presence;
using schema::read_mapping;

// Reasons, in one place so that the wording stays consistent: "expected ..." when the
// value has the wrong shape, "must ..." when it has the right shape but a bad value.
constexpr std::string_view bad_duration = "expected a duration like 250ms, 1s, 5m, 1h, 1d";
constexpr std::string_view duration_too_large = "duration is too large (at most 87600h, ten years)";
constexpr std::string_view not_positive = "must be greater than 0";
constexpr std::string_view bad_size = "expected a size like 16384, 64KiB, 10MiB, 1GiB";
constexpr std::string_view ambiguous_size_unit = "ambiguous unit, use KiB, MiB or GiB";
constexpr std::string_view size_too_large = "size is too large";
constexpr std::string_view bad_address = R"(expected an address like "0.0.0.0:8080" or "[::1]:8080")";
constexpr std::string_view ipv6_needs_brackets = R"(an IPv6 address must be in brackets, like "[::1]:8080")";
constexpr std::string_view host_not_ip = "host must be an IP address";
constexpr std::string_view listen_port_range = "port must be between 0 and 65535";
constexpr std::string_view bad_url = "expected a url like http://127.0.0.1:3000";
constexpr std::string_view https_url = "https upstreams are not supported yet";
constexpr std::string_view not_http_url = "url scheme must be http";
constexpr std::string_view url_userinfo = "url must not contain userinfo";
constexpr std::string_view url_query = "url must not contain a query";
constexpr std::string_view url_fragment = "url must not contain a fragment";
constexpr std::string_view url_host = "url host must be an IP address or a DNS name";
constexpr std::string_view url_port_range = "port must be between 1 and 65535";
constexpr std::string_view expected_single_document = "expected a single document";
constexpr std::string_view bad_host_port = R"(expected host:port like "redis:6379" or "[::1]:6379")";
constexpr std::string_view host_port_needs_brackets = R"(an IPv6 address must be in brackets, like "[::1]:6379")";
constexpr std::string_view bad_cidr = R"(expected an IP network like "10.0.0.0/8" or "::1/128", or an IP address)";
constexpr std::string_view expected_string = "expected a string";
constexpr std::string_view must_not_be_empty = "must not be empty";
constexpr std::string_view listed_twice = "listed twice";
constexpr std::string_view bad_env_name = "expected an environment variable name like SLUICE_HASH_SECRET";
constexpr std::string_view bad_header_name = "expected a header name like X-API-Key";
constexpr std::string_view bad_user_name = "expected a name of 1 to 128 letters, digits, '.', '_', '@' or '-'";
constexpr std::string_view bad_plan_name = "expected a name of lower-case letters, digits, '_' or '-'";
constexpr std::string_view api_keys_need_header = "needs clients.user.api_key_header (the header the key comes in)";
constexpr std::string_view bad_key_prefix =
    "must not contain blanks or braces (braces mark the Redis Cluster hash tag)";
constexpr std::string_view key_prefix_too_long = "must be at most 64 characters";
constexpr std::string_view jwt_alg_none = "alg none is never accepted";
constexpr std::string_view local_needs_shared_store =
    "local needs a shared store to fall back from (store.type redis or redis-cluster)";
constexpr std::string_view jwt_needs_secret = "required when HS256, HS384 or HS512 is listed in algorithms";
constexpr std::string_view jwt_needs_public_key = "required when RS256 or ES256 is listed in algorithms";
constexpr std::string_view leeway_too_large = "must be at most 10m";
constexpr std::string_view bad_policy_name = "a policy name may only use a-z, 0-9, _ and -";
constexpr std::string_view reserved_policy_name = R"("none" is reserved: a route uses it for no limit)";
constexpr std::string_view bad_offset = "expected a duration like -5h or 30m";
constexpr std::string_view month_fixed_only = "per: month is for algorithm: fixed (calendar windows)";
constexpr std::string_view offset_fixed_only = "window_offset is for algorithm: fixed";
constexpr std::string_view concurrency_takes_lease_only =
    "a concurrency tier takes lease only (it counts requests in flight, not requests per window)";
constexpr std::string_view lease_needs_concurrency = "lease applies to concurrency tiers only";
constexpr std::string_view bad_lease = "must be between 3s and 1h";
constexpr std::string_view concurrency_too_large =
    "must be at most 1000 (each request in flight is one entry in the identifier's state)";
constexpr std::string_view count_rejected_with_log =
    "count_rejected cannot apply to log tiers (a log would keep every refused request)";
constexpr std::string_view cost_header_needs_max_cost =
    "cost_header needs max_cost (the most one request may be charged)";
constexpr std::string_view max_cost_needs_cost_header = "max_cost applies with cost_header only";
constexpr std::string_view cost_header_needs_policy = "cost_header needs a route with a policy (not none)";
constexpr std::string_view plan_needs_user_source =
    "plans apply to users: set clients.user.api_key_header or clients.user.jwt";
constexpr std::string_view cost_header_framing = "must not be a field that frames the message (it is never relayed)";
constexpr std::string_view policy_without_tiers = "policy has no tiers, expected ip or user";
constexpr std::string_view plan_without_tiers = "plan has no tiers, expected user: [ ... ]";
constexpr std::string_view plan_policy_needs_plans = "user: plan needs plans (plans.<name>.user)";
constexpr std::string_view per_too_large = "must be at most 8784h (366 days)";
constexpr std::string_view precision_sliding_only = "precision applies to the sliding algorithm only";
constexpr std::string_view burst_gcra_only = "burst applies to the gcra algorithm only";
constexpr std::string_view no_default_precision =
    "the default precision, per / 10, is not a whole number of milliseconds: set precision";
constexpr std::string_view log_limit_too_large = "must be at most 1000 with the log algorithm";
constexpr std::string_view gcra_tolerance_too_large = "burst * per / limit must be at most 8784h";
constexpr std::string_view bad_route_path = "expected a path starting with /, without query or fragment";
constexpr std::string_view path_and_path_prefix = "set only one of path and path_prefix";
constexpr std::string_view route_needs_path = "expected path or path_prefix";
constexpr std::string_view bad_method = "expected an HTTP method like GET";
constexpr std::string_view bad_route_host = "expected a host name like api.example.com";
constexpr std::string_view expected_policy_name = "expected a policy name";

// Bounds that keep every limiter computation (integer microseconds) far from overflow.
constexpr std::int64_t max_count = 1'000'000'000;
constexpr duration max_per = std::chrono::hours(8784);
constexpr duration month_per = std::chrono::hours(31 * 24);  // per: month counts as the longest month
constexpr std::int64_t max_log_limit = 1000;
constexpr std::int64_t max_concurrency = 1000;
constexpr std::int64_t max_buckets = 120;
constexpr duration max_jwt_leeway = std::chrono::minutes(10);
constexpr std::size_t max_key_prefix = 64;

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

// "250ms" -> {250, "ms"}. The number is nullopt when it has too many digits for 64 bits.
struct number_with_unit {
    std::optional<std::uint64_t> number;
    std::string_view unit;
};

std::optional<number_with_unit> split_number(std::string_view s) {
    std::size_t digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
    if (digits == 0) return std::nullopt;
    number_with_unit out{std::uint64_t{0}, s.substr(digits)};
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + digits, *out.number);
    if (ec != std::errc()) out.number.reset();
    return out;
}

// A plain decimal number, or the maximum when it has too many digits.
std::optional<std::uint64_t> parse_decimal(std::string_view s) {
    auto n = split_number(s);
    if (!n || !n->unit.empty()) return std::nullopt;
    return n->number.value_or(std::numeric_limits<std::uint64_t>::max());
}

// Durations are kept small enough to convert to nanoseconds without overflow.
// Ten years: every deadline is `now + d` on a nanosecond steady clock, which must not overflow.
constexpr std::uint64_t max_duration_ms = 10ull * 365 * 24 * 3'600'000;

struct duration_unit {
    std::string_view name;
    std::uint64_t ms;
};

// Largest first: format_duration() picks the first unit that divides exactly.
constexpr std::array<duration_unit, 4> duration_units{{{"h", 3'600'000}, {"m", 60'000}, {"s", 1000}, {"ms", 1}}};

std::optional<std::uint64_t> duration_unit_ms(std::string_view unit) {
    // Days are read but not written: format_duration's text is part of tier ids, which
    // must not change for the tiers that already say 24h.
    if (unit == "d") return 86'400'000;
    for (const duration_unit& u : duration_units) {
        if (u.name == unit) return u.ms;
    }
    return std::nullopt;
}

parsed<duration> parse_duration_why(std::string_view s) {
    auto n = split_number(s);
    if (!n) return bad_duration;
    auto unit = duration_unit_ms(n->unit);
    if (!unit) return bad_duration;
    if (!n->number || *n->number > max_duration_ms / *unit) return duration_too_large;
    return duration(static_cast<duration::rep>(*n->number * *unit));
}

// Sizes are bytes, or binary multiples: KiB, MiB, GiB. KB/MB/GB are refused rather than
// guessed at, since people use them for both powers of 1000 and of 1024.
parsed<std::uint64_t> size_unit_bytes(std::string_view unit) {
    if (unit.empty()) return std::uint64_t{1};
    if (unit == "KiB") return std::uint64_t{1} << 10;
    if (unit == "MiB") return std::uint64_t{1} << 20;
    if (unit == "GiB") return std::uint64_t{1} << 30;
    if (unit == "KB" || unit == "MB" || unit == "GB") return ambiguous_size_unit;
    return bad_size;
}

parsed<std::uint64_t> parse_size_why(std::string_view s) {
    auto n = split_number(s);
    if (!n) return bad_size;
    auto unit = size_unit_bytes(n->unit);
    if (!unit.value) return reason_text{std::move(unit.reason)};
    if (!n->number || *n->number > std::numeric_limits<std::uint64_t>::max() / *unit.value) {
        return size_too_large;
    }
    return *n->number * *unit.value;
}

bool is_ip(int family, std::string_view host) {
    unsigned char buf[sizeof(in6_addr)];
    return inet_pton(family, std::string(host).c_str(), buf) == 1;
}

parsed<address> make_address(std::string_view host, std::string_view port_text, int family) {
    if (!is_ip(family, host)) return family == AF_INET6 ? bad_address : host_not_ip;
    auto port = parse_decimal(port_text);
    if (!port) return bad_address;
    if (*port > 65535) return listen_port_range;
    return address{std::string(host), static_cast<std::uint16_t>(*port)};
}

// "host:port" or "[host]:port", split at the colon before the port.
struct host_and_port {
    std::string_view host, port;
    bool bracketed = false;
    // An IPv6 literal written without brackets: the host still holds a colon.
    bool needs_brackets() const { return !bracketed && host.find(':') != std::string_view::npos; }
};

std::optional<host_and_port> split_host_port(std::string_view s) {
    if (s.starts_with('[')) {
        auto close = s.find("]:");
        if (close == std::string_view::npos) return std::nullopt;
        return host_and_port{s.substr(1, close - 1), s.substr(close + 2), true};
    }
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    return host_and_port{s.substr(0, colon), s.substr(colon + 1), false};
}

parsed<address> parse_address_why(std::string_view s) {
    auto parts = split_host_port(s);
    if (!parts) return bad_address;
    if (parts->needs_brackets()) return ipv6_needs_brackets;
    return make_address(parts->host, parts->port, parts->bracketed ? AF_INET6 : AF_INET);
}

bool is_ascii_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

bool is_dns_name(std::string_view host) {
    return !host.empty() && std::all_of(host.begin(), host.end(),
                                        [](char c) { return is_ascii_alnum(c) || c == '-' || c == '.' || c == '_'; });
}

// An RFC 9110 token: header field names and request methods.
bool is_token(std::string_view s) {
    constexpr std::string_view symbols = "!#$%&'*+-.^_`|~";
    return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
        return is_ascii_alnum(c) || symbols.find(c) != std::string_view::npos;
    });
}

bool is_env_name(std::string_view s) {
    return !s.empty() && !(s[0] >= '0' && s[0] <= '9') &&
           std::all_of(s.begin(), s.end(), [](char c) { return is_ascii_alnum(c) || c == '_'; });
}

bool is_user_name(std::string_view s) {
    return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
        return is_ascii_alnum(c) || c == '.' || c == '_' || c == '@' || c == '-';
    });
}

bool is_policy_name(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
}

bool is_route_path(std::string_view s) {
    return s.starts_with('/') && std::none_of(s.begin(), s.end(), [](char c) {
               return static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '?' || c == '#';
           });
}

bool is_key_prefix(std::string_view s) {
    return std::none_of(s.begin(), s.end(),
                        [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == '{' || c == '}'; });
}

std::string to_lower(std::string s) {
    for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    return s;
}

std::string to_upper(std::string s) {
    for (char& c : s) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
    return s;
}

parsed<std::string> url_host_of(const boost::urls::url_view& u) {
    switch (u.host_type()) {
        case boost::urls::host_type::ipv4: return std::string(u.encoded_host());
        case boost::urls::host_type::ipv6: return std::string(u.encoded_host_address());
        case boost::urls::host_type::name:
            if (is_dns_name(u.encoded_host())) return std::string(u.encoded_host());
            return u.encoded_host().empty() ? bad_url : url_host;
        default: return url_host;
    }
}

parsed<std::uint16_t> url_port_of(const boost::urls::url_view& u) {
    if (!u.has_port()) return std::uint16_t{80};
    auto port = parse_decimal(u.port());
    if (!port) return bad_url;
    if (*port < 1 || *port > 65535) return url_port_range;
    return static_cast<std::uint16_t>(*port);
}

std::string base_path_of(std::string_view path) {
    while (path.ends_with('/')) path.remove_suffix(1);
    return std::string(path);
}

std::string_view check_url_shape(const boost::urls::url_view& u) {
    if (u.scheme_id() == boost::urls::scheme::https) return https_url;
    if (u.scheme_id() != boost::urls::scheme::http) return not_http_url;
    if (!u.has_authority()) return bad_url;
    if (u.has_userinfo()) return url_userinfo;
    if (u.has_query()) return url_query;
    if (u.has_fragment()) return url_fragment;
    return {};
}

// Only the characters RFC 3986 allows in a URI. (Boost.URL 1.81 asserts on some others,
// boostorg/url#665, before it would refuse them.)
bool uri_characters(std::string_view s) {
    constexpr std::string_view allowed = "-._~:/?#[]@!$&'()*+,;=%";
    return std::all_of(s.begin(), s.end(), [&](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               allowed.find(c) != std::string_view::npos;
    });
}

parsed<upstream_url> parse_upstream_url_why(std::string_view s) {
    if (!uri_characters(s)) return bad_url;
    auto r = boost::urls::parse_uri(s);
    if (!r) return bad_url;
    const boost::urls::url_view& u = *r;
    if (auto why = check_url_shape(u); !why.empty()) return why;
    auto host = url_host_of(u);
    if (!host.value) return reason_text{std::move(host.reason)};
    auto port = url_port_of(u);
    if (!port.value) return reason_text{std::move(port.reason)};
    return upstream_url{std::move(*host.value), *port.value, base_path_of(u.encoded_path()),
                        std::string(u.encoded_authority())};
}

parsed<host_port> parse_host_port_why(std::string_view s) {
    auto parts = split_host_port(s);
    if (!parts) return bad_host_port;
    if (parts->needs_brackets()) return host_port_needs_brackets;
    bool host_ok = parts->bracketed ? is_ip(AF_INET6, parts->host) : is_dns_name(parts->host);
    auto port = parse_decimal(parts->port);
    if (!host_ok || !port) return bad_host_port;
    if (*port < 1 || *port > 65535) return url_port_range;
    return host_port{std::string(parts->host), static_cast<std::uint16_t>(*port)};
}

parsed<unsigned> parse_prefix_length(std::string_view s, unsigned max) {
    auto n = parse_decimal(s);
    if (!n) return bad_cidr;
    if (*n > max) return reason_text{"prefix length must be at most " + std::to_string(max)};
    return static_cast<unsigned>(*n);
}

boost::asio::ip::address network_of(const boost::asio::ip::address& a, unsigned prefix) {
    auto bits = static_cast<unsigned short>(prefix);
    if (a.is_v4()) return boost::asio::ip::network_v4(a.to_v4(), bits).canonical().address();
    return boost::asio::ip::network_v6(a.to_v6(), bits).canonical().address();
}

parsed<cidr> parse_cidr_why(std::string_view s) {
    auto slash = s.find('/');
    std::string ip(s.substr(0, slash));
    boost::system::error_code ec;
    auto a = boost::asio::ip::make_address(ip, ec);
    if (ec || ip.find('%') != std::string::npos) return bad_cidr;  // no IPv6 zone ids
    unsigned max = a.is_v4() ? 32 : 128;
    unsigned prefix = max;
    if (slash != std::string_view::npos) {
        auto p = parse_prefix_length(s.substr(slash + 1), max);
        if (!p.value) return reason_text{std::move(p.reason)};
        prefix = *p.value;
    }
    auto network = network_of(a, prefix);
    if (network != a) {
        return reason_text{"network has host bits set, did you mean " + network.to_string() + "/" +
                           std::to_string(prefix) + "?"};
    }
    return cidr{network, prefix};
}

// --- YAML readers: a typed value from a node, or a config_error at its position ---

template <class T>
T take(const node_ref& v, parsed<T> p) {
    if (!p.value) v.fail(p.reason);
    return std::move(*p.value);
}

enum class zero { allowed, refused };

duration read_duration(const node_ref& v, zero z) {
    duration d = take(v, parse_duration_why(v.scalar(bad_duration)));
    if (z == zero::refused && d.count() == 0) v.fail(not_positive);
    return d;
}

std::uint64_t read_size(const node_ref& v, std::uint64_t min, std::uint64_t max) {
    std::uint64_t n = take(v, parse_size_why(v.scalar(bad_size)));
    schema::check_range(v, n, min, max);
    return n;
}

address read_address(const node_ref& v) { return take(v, parse_address_why(v.scalar(bad_address))); }

upstream_url read_upstream_url(const node_ref& v) { return take(v, parse_upstream_url_why(v.scalar(bad_url))); }

host_port read_host_port(const node_ref& v) { return take(v, parse_host_port_why(v.scalar(bad_host_port))); }

cidr read_cidr(const node_ref& v) { return take(v, parse_cidr_why(v.scalar(bad_cidr))); }

// A string that must not be empty.
std::string read_string(const node_ref& v) {
    const std::string& s = v.scalar(expected_string);
    if (s.empty()) v.fail(must_not_be_empty);
    return s;
}

// A string that `valid` accepts; `expected` says what it should look like.
std::string read_checked(const node_ref& v, bool (*valid)(std::string_view), std::string_view expected) {
    const std::string& s = v.scalar(expected);
    if (!valid(s)) v.fail(expected);
    return s;
}

std::string read_env_name(const node_ref& v) { return read_checked(v, is_env_name, bad_env_name); }

// One of `names`, as the enumerator at the same position: list them in declaration order.
template <class E>
E read_enum(const node_ref& v, std::initializer_list<std::string_view> names) {
    return static_cast<E>(schema::read_choice_index(v, names));
}

enum class empty_list { allowed, refused };

void read_list(const node_ref& v, empty_list empty, const std::function<void(const node_ref&)>& read_item) {
    if (schema::read_sequence(v, read_item) == 0 && empty == empty_list::refused) {
        v.fail(must_not_be_empty);
    }
}

// A list of distinct strings, each read by `read_item`.
std::vector<std::string> read_distinct(const node_ref& v, std::string (*read_item)(const node_ref&)) {
    std::vector<std::string> out;
    read_list(v, empty_list::refused, [&](const node_ref& item) {
        std::string s = read_item(item);
        if (std::find(out.begin(), out.end(), s) != out.end()) item.fail(listed_twice);
        out.push_back(std::move(s));
    });
    return out;
}

std::vector<cidr> read_cidrs(const node_ref& v) {
    std::vector<cidr> out;
    read_list(v, empty_list::allowed, [&](const node_ref& item) { out.push_back(read_cidr(item)); });
    return out;
}

// A limit, burst or cost.
std::int64_t read_count(const node_ref& v) { return schema::read_uint_as<std::int64_t>(v, 1, max_count); }

// --- sections ---

void read_server(const node_ref& n, server_config& out) {
    read_mapping(
        n, {
               {"listen", [&](const node_ref& v) { out.listen = read_address(v); }},
               {"threads", [&](const node_ref& v) { out.threads = schema::read_uint_as(v, 0u, 1024u); }},
               {"max_connections",
                [&](const node_ref& v) { out.max_connections = schema::read_uint_as<std::size_t>(v, 1, 10'000'000); }},
               {"header_timeout", [&](const node_ref& v) { out.header_timeout = read_duration(v, zero::refused); }},
               {"idle_timeout", [&](const node_ref& v) { out.idle_timeout = read_duration(v, zero::refused); }},
               {"drain_timeout", [&](const node_ref& v) { out.drain_timeout = read_duration(v, zero::allowed); }},
               {"body_timeout", [&](const node_ref& v) { out.body_timeout = read_duration(v, zero::refused); }},
               {"body_min_rate", [&](const node_ref& v) { out.body_min_rate = read_size(v, 0, 1ull << 40); }},
               {"max_header_bytes", [&](const node_ref& v) { out.max_header_bytes = read_size(v, 1024, 1 << 20); }},
               {"max_body_bytes",
                [&](const node_ref& v) {
                    out.max_body_bytes = read_size(v, 0, std::numeric_limits<std::uint64_t>::max());
                }},
           });
}

void read_admin(const node_ref& n, admin_config& out) {
    read_mapping(n, {
                        {"listen", [&](const node_ref& v) { out.listen = read_address(v); }},
                    });
}

void read_upstream(const node_ref& n, upstream_config& out) {
    read_mapping(
        n, {
               {"url", [&](const node_ref& v) { out.url = read_upstream_url(v); }, presence::required},
               {"connect_timeout", [&](const node_ref& v) { out.connect_timeout = read_duration(v, zero::refused); }},
               {"timeout", [&](const node_ref& v) { out.timeout = read_duration(v, zero::refused); }},
               {"max_idle_per_worker",
                [&](const node_ref& v) { out.max_idle_per_worker = schema::read_uint_as<std::size_t>(v, 0, 100'000); }},
           });
}

void read_proxy(const node_ref& n, proxy_config& out) {
    read_mapping(n, {
                        {"request_buffering", [&](const node_ref& v) { out.request_buffering = schema::read_bool(v); }},
                        {"request_buffer_bytes",
                         [&](const node_ref& v) { out.request_buffer_bytes = read_size(v, 0, 64 << 20); }},
                    });
}

void read_log(const node_ref& n, log_config& out) {
    read_mapping(n, {
                        {"level",
                         [&](const node_ref& v) {
                             out.level = schema::read_choice(v, {"trace", "debug", "info", "warn", "error", "off"});
                         }},
                        {"access",
                         [&](const node_ref& a) {
                             read_mapping(a, {
                                                 // A file path, "-" for stdout or "off".
                                                 {"path",
                                                  [&](const node_ref& v) {
                                                      out.access_path = read_string(v);
                                                      if (out.access_path.empty())
                                                          v.fail("must not be empty: use a file path, \"-\" or off");
                                                  }},
                                             });
                         }},
                    });
}

// --- store ---

std::vector<host_port> read_host_ports(const node_ref& v) {
    std::vector<host_port> out;
    read_list(v, empty_list::refused, [&](const node_ref& item) { out.push_back(read_host_port(item)); });
    return out;
}

std::string read_key_prefix(const node_ref& v) {
    std::string s = read_string(v);
    if (!is_key_prefix(s)) v.fail(bad_key_prefix);
    if (s.size() > max_key_prefix) v.fail(key_prefix_too_long);
    return s;
}

// A file the gateway will open at start: it must be readable now (config load, --check).
std::string read_readable_file(const node_ref& v) {
    std::string path = read_string(v);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) v.fail("no such file: " + path);
    if (::access(path.c_str(), R_OK) != 0) v.fail("cannot read " + path + ": " + std::strerror(errno));
    return path;
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

// --- clients ---

std::string read_jwt_algorithm(const node_ref& v) {
    if (v.node().IsScalar() && to_lower(v.node().Scalar()) == "none") v.fail(jwt_alg_none);
    return schema::read_choice(v, {"HS256", "HS384", "HS512", "RS256", "ES256"});
}

bool lists_any(const std::vector<std::string>& algorithms, std::initializer_list<std::string_view> wanted) {
    return std::any_of(algorithms.begin(), algorithms.end(), [&](const std::string& a) {
        return std::find(wanted.begin(), wanted.end(), a) != wanted.end();
    });
}

// The key material the listed algorithms need; reported like a missing key.
void check_jwt_keys(const node_ref& n, const jwt_config& jwt) {
    if (lists_any(jwt.algorithms, {"HS256", "HS384", "HS512"}) && jwt.secret_env.empty()) {
        n.fail_at(n.mark(), n.path_of("secret_env"), jwt_needs_secret);
    }
    if (lists_any(jwt.algorithms, {"RS256", "ES256"}) && jwt.public_key_file.empty()) {
        n.fail_at(n.mark(), n.path_of("public_key_file"), jwt_needs_public_key);
    }
}

duration read_leeway(const node_ref& v) {
    duration d = read_duration(v, zero::allowed);
    if (d > max_jwt_leeway) v.fail(leeway_too_large);
    return d;
}

jwt_config read_jwt(const node_ref& n) {
    jwt_config jwt;
    read_mapping(n,
                 {
                     {"header", [&](const node_ref& v) { jwt.header = read_checked(v, is_token, bad_header_name); }},
                     {"algorithms", [&](const node_ref& v) { jwt.algorithms = read_distinct(v, read_jwt_algorithm); },
                      presence::required},
                     {"secret_env", [&](const node_ref& v) { jwt.secret_env = read_env_name(v); }},
                     {"public_key_file", [&](const node_ref& v) { jwt.public_key_file = read_string(v); }},
                     {"claim", [&](const node_ref& v) { jwt.claim = read_string(v); }},
                     {"plan_claim", [&](const node_ref& v) { jwt.plan_claim = read_string(v); }},
                     {"leeway", [&](const node_ref& v) { jwt.leeway = read_leeway(v); }},
                 });
    check_jwt_keys(n, jwt);
    return jwt;
}

YAML::Node parse_document(const std::string& text, const std::string& name);

std::array<std::uint8_t, 32> read_sha256(const node_ref& v) {
    const std::string& s = v.scalar("64 hex digits (the SHA-256 of the key)");
    std::array<std::uint8_t, 32> out{};
    const auto digit = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    if (s.size() != 64)
        v.fail("expected 64 hex digits (the SHA-256 of the key), got " + std::to_string(s.size()) + " characters");
    for (std::size_t i = 0; i < 32; ++i) {
        const int hi = digit(s[2 * i]), lo = digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0) v.fail("expected 64 hex digits (the SHA-256 of the key)");
        out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return out;
}

// The registry file: a list of { sha256, user, plan }. Its errors name its own file.
std::vector<api_key_entry> read_key_file(const std::string& path) {
    const YAML::Node doc = parse_document(read_stable_file(path), path);
    const node_ref root(doc, path);
    std::vector<api_key_entry> keys;
    if (root.is_null()) return keys;
    std::map<std::array<std::uint8_t, 32>, std::size_t> seen;
    schema::read_sequence(root, [&](const node_ref& item) {
        api_key_entry e;
        read_mapping(item,
                     {
                         {"sha256", [&](const node_ref& v) { e.sha256 = read_sha256(v); }, presence::required},
                         {"user", [&](const node_ref& v) { e.user = read_checked(v, is_user_name, bad_user_name); },
                          presence::required},
                         {"plan",
                          [&](const node_ref& v) {
                              e.plan = read_checked(v, is_policy_name, bad_plan_name);
                              e.plan_at = v.where();
                          }},
                     });
        if (auto [it, fresh] = seen.emplace(e.sha256, keys.size()); !fresh) {
            item.fail("the same key as entry " + std::to_string(it->second));
        }
        keys.push_back(std::move(e));
    });
    return keys;
}

api_keys_config read_api_keys(const node_ref& n) {
    api_keys_config out;
    read_mapping(n, {
                        {"file", [&](const node_ref& v) { out.file = read_string(v); }, presence::required},
                        {"require_known", [&](const node_ref& v) { out.require_known = schema::read_bool(v); }},
                    });
    std::filesystem::path path(out.file);
    if (path.is_relative()) path = std::filesystem::path(n.source()).parent_path() / path;
    try {
        out.keys = read_key_file(path.string());
    } catch (const config_error& e) {
        // The file's own errors name it; one that cannot be read is named here, at `file`.
        if (std::string_view(e.what()).starts_with(path.string() + ": cannot read")) {
            n.fail_at(n.mark(), n.path_of("file"), e.what());
        }
        throw;
    }
    return out;
}

void read_user(const node_ref& n, clients_config& out) {
    read_mapping(n, {
                        {"api_key_header",
                         [&](const node_ref& v) { out.api_key_header = read_checked(v, is_token, bad_header_name); }},
                        {"jwt", [&](const node_ref& v) { out.jwt = read_jwt(v); }},
                        {"api_keys", [&](const node_ref& v) { out.api_keys = read_api_keys(v); }},
                        {"default_plan",
                         [&](const node_ref& v) {
                             out.default_plan = read_checked(v, is_policy_name, bad_plan_name);
                             out.default_plan_at = v.where();
                         }},
                    });
    if (out.api_keys && out.api_key_header.empty()) n.fail_at(n.mark(), n.path_of("api_keys"), api_keys_need_header);
}

void read_clients(const node_ref& n, clients_config& out) {
    using forwarded_kind = clients_config::forwarded_kind;
    read_mapping(n,
                 {
                     {"trusted_proxies", [&](const node_ref& v) { out.trusted_proxies = read_cidrs(v); }},
                     {"forwarded_header",
                      [&](const node_ref& v) {
                          out.forwarded_header = read_enum<forwarded_kind>(v, {"x-forwarded-for", "forwarded", "none"});
                      }},
                     {"ipv6_prefix", [&](const node_ref& v) { out.ipv6_prefix = schema::read_uint_as(v, 1u, 128u); }},
                     {"allow", [&](const node_ref& v) { out.allow = read_cidrs(v); }},
                     {"user", [&](const node_ref& v) { read_user(v, out); }},
                 });
}

void read_response(const node_ref& n, response_config& out) {
    using header_style = response_config::header_style;
    read_mapping(n, {
                        {"headers",
                         [&](const node_ref& v) {
                             out.headers = read_enum<header_style>(v, {"ietf", "legacy", "both", "none"});
                         }},
                    });
}

// --- policies ---

// In the declaration order of `algorithm`.
constexpr std::array<std::string_view, 5> algorithm_names{"fixed", "sliding", "gcra", "log", "concurrency"};

// Where the keys of a tier were written, for the checks that need the whole tier.
struct tier_nodes {
    std::optional<node_ref> limit, per, precision, burst, window_offset, algo, min_interval, concurrency, lease;
};

duration read_per(const node_ref& v, bool& month) {
    if (v.node().IsScalar() && v.node().Scalar() == "month") {
        month = true;
        return month_per;
    }
    duration d = read_duration(v, zero::refused);
    if (d > max_per) v.fail(per_too_large);
    return d;
}

// A duration with an optional sign: "-5h", "+90m".
duration read_signed_duration(const node_ref& v) {
    const std::string& text = v.scalar(bad_offset);
    const bool signed_text = text.starts_with('-') || text.starts_with('+');
    duration d = take(v, parse_duration_why(signed_text ? std::string_view(text).substr(1) : text));
    return text.starts_with('-') ? -d : d;
}

void settle_sliding(tier_config& t, const tier_nodes& at) {
    if (!at.precision) {
        if (t.per.count() % 10 != 0) at.per->fail(no_default_precision);
        t.precision = t.per / 10;
        return;
    }
    if (t.per % t.precision != duration::zero()) {
        at.precision->fail("must divide per (" + format_duration(t.per) + ") exactly");
    }
    if (t.per / t.precision > max_buckets) {
        at.precision->fail("too many buckets: per / precision is " + std::to_string(t.per / t.precision) +
                           ", at most " + std::to_string(max_buckets));
    }
}

void settle_gcra(tier_config& t, const tier_nodes& at) {
    if (!at.burst) {
        t.burst = t.limit;
        return;
    }
    double tolerance_ms =
        static_cast<double>(t.burst) * static_cast<double>(t.per.count()) / static_cast<double>(t.limit);
    if (tolerance_ms > static_cast<double>(max_per.count())) {
        at.burst->fail(gcra_tolerance_too_large);
    }
}

// Cross-key rules and defaults that depend on the algorithm.
void settle_tier(tier_config& t, const tier_nodes& at) {
    if (at.precision && t.algo != algorithm::sliding) at.precision->fail(precision_sliding_only);
    if (at.burst && t.algo != algorithm::gcra) at.burst->fail(burst_gcra_only);
    if (t.month && t.algo != algorithm::fixed) at.per->fail(month_fixed_only);
    if (at.window_offset) {
        if (t.algo != algorithm::fixed) at.window_offset->fail(offset_fixed_only);
        const auto bound = std::min(t.per, duration(std::chrono::hours(24)));
        if (t.window_offset >= bound || -t.window_offset >= bound) {
            at.window_offset->fail("must be between -" + format_duration(bound) + " and " + format_duration(bound) +
                                   ", exclusive");
        }
    }
    switch (t.algo) {
        case algorithm::sliding: settle_sliding(t, at); break;
        case algorithm::fixed: t.precision = t.per; break;
        case algorithm::gcra: settle_gcra(t, at); break;
        case algorithm::log:
            if (t.limit > max_log_limit) at.limit->fail(log_limit_too_large);
            break;
        case algorithm::concurrency: break;  // settle_concurrency
    }
}

// `{concurrency: N, lease: 30s}`: at most N requests in flight, each slot leased for `lease`.
void settle_concurrency(tier_config& t, const tier_nodes& at) {
    for (const auto* other :
         {&at.limit, &at.per, &at.algo, &at.precision, &at.burst, &at.min_interval, &at.window_offset}) {
        if (*other) (*other)->fail_at_key(concurrency_takes_lease_only);
    }
    t.algo = algorithm::concurrency;
    if (t.limit > max_concurrency) at.concurrency->fail(concurrency_too_large);
    if (!at.lease) {
        t.per = std::chrono::seconds(30);
    } else if (t.per < std::chrono::seconds(3) || t.per > std::chrono::hours(1)) {
        at.lease->fail(bad_lease);
    }
}

tier_config read_tier(const node_ref& n, const std::string& kind) {
    tier_config t;
    t.kind = kind;
    tier_nodes at;
    read_mapping(n,
                 {
                     {"concurrency",
                      [&](const node_ref& v) {
                          t.limit = read_count(v);
                          at.concurrency = v;
                      }},
                     {"lease",
                      [&](const node_ref& v) {
                          t.per = read_duration(v, zero::refused);
                          at.lease = v;
                      }},
                     {"limit",
                      [&](const node_ref& v) {
                          t.limit = read_count(v);
                          at.limit = v;
                      }},
                     {"per",
                      [&](const node_ref& v) {
                          t.per = read_per(v, t.month);
                          at.per = v;
                      }},
                     {"window_offset",
                      [&](const node_ref& v) {
                          t.window_offset = read_signed_duration(v);
                          at.window_offset = v;
                      }},
                     {"algorithm",
                      [&](const node_ref& v) {
                          t.algo = read_enum<algorithm>(v, {"fixed", "sliding", "gcra", "log"});  // as algorithm_names
                          at.algo = v;
                      }},
                     {"precision",
                      [&](const node_ref& v) {
                          t.precision = read_duration(v, zero::refused);
                          at.precision = v;
                      }},
                     {"burst",
                      [&](const node_ref& v) {
                          t.burst = read_count(v);
                          at.burst = v;
                      }},
                     {"min_interval",
                      [&](const node_ref& v) {
                          t.min_interval = read_duration(v, zero::allowed);
                          at.min_interval = v;
                      }},
                 });
    if (at.concurrency) {
        settle_concurrency(t, at);
        return t;
    }
    if (at.lease) at.lease->fail_at_key(lease_needs_concurrency);
    if (!at.limit)
        n.fail_at(n.mark(), n.path_of("limit"), "required key is missing (a tier has limit and per, or concurrency)");
    if (!at.per) n.fail_at(n.mark(), n.path_of("per"), "required key is missing");
    settle_tier(t, at);
    return t;
}

std::vector<tier_config> read_tiers(const node_ref& v, const std::string& kind) {
    std::vector<tier_config> out;
    schema::read_sequence(v, [&](const node_ref& item) {
        tier_config t = read_tier(item, kind);
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (shares_counter(out[i], t)) {
                item.fail(t.algo == algorithm::concurrency
                              ? "duplicate tier (tier " + std::to_string(i) + " is a concurrency tier too)"
                              : "duplicate tier (tier " + std::to_string(i) +
                                    " has the same algorithm, per and precision or burst: both would count in one "
                                    "place)");
            }
        }
        out.push_back(std::move(t));
    });
    return out;
}

bool has_log_tier(const std::vector<tier_config>& tiers) {
    return std::any_of(tiers.begin(), tiers.end(), [](const tier_config& t) { return t.algo == algorithm::log; });
}

policy_config read_policy(const node_ref& n, const std::string& name) {
    policy_config p;
    std::optional<node_ref> count_rejected_at;
    p.name = name;
    read_mapping(n, {
                        {"shadow", [&](const node_ref& v) { p.shadow = schema::read_bool(v); }},
                        {"count_rejected",
                         [&](const node_ref& v) {
                             p.count_rejected = schema::read_bool(v);
                             count_rejected_at = v;
                         }},
                        {"ip", [&](const node_ref& v) { p.ip = read_tiers(v, "ip"); }},
                        {"user",
                         [&](const node_ref& v) {
                             if (v.node().IsScalar() && v.node().Scalar() == "plan") {
                                 p.user_by_plan = true;
                                 p.user_at = v.where();
                             } else {
                                 p.user = read_tiers(v, "user");
                             }
                         }},
                    });
    if (p.ip.empty() && p.user.empty() && !p.user_by_plan) n.fail(policy_without_tiers);
    if (p.count_rejected && (has_log_tier(p.ip) || has_log_tier(p.user))) {
        count_rejected_at->fail(count_rejected_with_log);
    }
    return p;
}

void read_policies(const node_ref& n, std::vector<policy_config>& out) {
    schema::read_entries(n, [&](const std::string& name, const node_ref& v) {
        if (name == "none") v.fail_at_key(reserved_policy_name);
        if (!is_policy_name(name)) v.fail_at_key(bad_policy_name);
        out.push_back(read_policy(v, name));
    });
}

void read_plans(const node_ref& n, std::vector<plan_config>& out) {
    schema::read_entries(n, [&](const std::string& name, const node_ref& v) {
        if (!is_policy_name(name)) v.fail_at_key(bad_plan_name);
        plan_config plan{name, {}};
        read_mapping(v, {{"user", [&](const node_ref& u) { plan.user = read_tiers(u, "user"); }, presence::required}});
        if (plan.user.empty()) v.fail(plan_without_tiers);
        out.push_back(std::move(plan));
    });
}

// Every plan a registry entry, clients.user.default_plan or a policy names must exist;
// checked once all are read, as plans may come after them in the file.
void check_plans(const config& c) {
    const auto known = [&](const std::string& name, const std::string& at) {
        if (!name.empty() && c.find_plan(name) == nullptr) throw config_error(at + ": no plan named \"" + name + "\"");
    };
    known(c.clients.default_plan, c.clients.default_plan_at);
    const bool has_user_source = !c.clients.api_key_header.empty() || c.clients.jwt.has_value();
    if (!c.clients.default_plan.empty() && !has_user_source)
        throw config_error(c.clients.default_plan_at + ": " + std::string(plan_needs_user_source));
    if (c.clients.api_keys) {
        for (const auto& e : c.clients.api_keys->keys) known(e.plan, e.plan_at);
    }
    for (const auto& p : c.policies) {
        if (p.user_by_plan && c.plans.empty())
            throw config_error(p.user_at + ": " + std::string(plan_policy_needs_plans));
        if (p.user_by_plan && !has_user_source)
            throw config_error(p.user_at + ": " + std::string(plan_needs_user_source));
        if (!p.user_by_plan || !p.count_rejected) continue;
        for (const auto& plan : c.plans) {
            if (has_log_tier(plan.user)) {
                std::string why(count_rejected_with_log);
                why.append(", and plans.").append(plan.name).append(" has one");
                throw config_error(p.user_at + ": " + why);
            }
        }
    }
}

// --- routes ---

// Where a route names its policy and cost: checked once every policy is known.
struct route_nodes {
    std::optional<node_ref> policy, cost, cost_header, max_cost;
};

std::string read_method(const node_ref& v) { return to_upper(read_checked(v, is_token, bad_method)); }

// Requests are matched on their normalised path without ";params": a route path in any
// other form would never match.
void read_match(const node_ref& n, route_config& r) {
    auto read_path = [&](const node_ref& v, std::string& out) {
        if (!r.path.empty() || !r.path_prefix.empty()) v.fail_at_key(path_and_path_prefix);
        out = read_checked(v, is_route_path, bad_route_path);
        r.path_at = v.where();  // the router checks the path is in its normal form
    };
    read_mapping(
        n, {
               {"path", [&](const node_ref& v) { read_path(v, r.path); }},
               {"path_prefix", [&](const node_ref& v) { read_path(v, r.path_prefix); }},
               {"methods", [&](const node_ref& v) { r.methods = read_distinct(v, read_method); }},
               {"host", [&](const node_ref& v) { r.host = to_lower(read_checked(v, is_dns_name, bad_route_host)); }},
               {"case_insensitive", [&](const node_ref& v) { r.case_insensitive = schema::read_bool(v); }},
           });
    if (r.path.empty() && r.path_prefix.empty()) n.fail(route_needs_path);
}

// Fields that frame or route a message: a route's cost_header may not name one, since it is
// never relayed.
bool is_framing_field(std::string_view name) {
    static constexpr std::array<std::string_view, 10> framing{
        "content-length", "transfer-encoding", "connection",   "keep-alive", "upgrade", "te",
        "trailer",        "proxy-connection",  "content-type", "via"};
    const std::string lower = to_lower(std::string(name));
    return std::find(framing.begin(), framing.end(), lower) != framing.end();
}

route_config read_route(const node_ref& n, route_nodes& at) {
    route_config r;
    read_mapping(n, {
                        {"match", [&](const node_ref& v) { read_match(v, r); }, presence::required},
                        {"policy",
                         [&](const node_ref& v) {
                             r.policy = v.scalar(expected_policy_name);
                             at.policy = v;
                         },
                         presence::required},
                        {"cost",
                         [&](const node_ref& v) {
                             r.cost = read_count(v);
                             at.cost = v;
                         }},
                        {"name", [&](const node_ref& v) { r.name = read_string(v); }},
                        {"cost_header",
                         [&](const node_ref& v) {
                             r.cost_header = read_checked(v, is_token, bad_header_name);
                             if (is_framing_field(r.cost_header)) v.fail(cost_header_framing);
                             at.cost_header = v;
                         }},
                        {"max_cost",
                         [&](const node_ref& v) {
                             r.max_cost = read_count(v);
                             at.max_cost = v;
                         }},
                    });
    if (r.name.empty()) r.name = r.path.empty() ? r.path_prefix + "*" : r.path;
    if (at.cost_header && !at.max_cost) at.cost_header->fail_at_key(cost_header_needs_max_cost);
    if (at.max_cost && !at.cost_header) at.max_cost->fail_at_key(max_cost_needs_cost_header);
    if (at.max_cost && r.max_cost < r.cost) at.max_cost->fail("must be at least the route's cost");
    return r;
}

void read_routes(const node_ref& n, std::vector<route_config>& out, std::vector<route_nodes>& at) {
    schema::read_sequence(n, [&](const node_ref& item) { out.push_back(read_route(item, at.emplace_back())); });
}

std::string cost_exceeds(std::int64_t cost, std::string_view what, std::int64_t bound, const std::string& where,
                         std::size_t index) {
    std::ostringstream s;
    s << "cost " << cost << " exceeds the " << what << ' ' << bound << " of " << where << '[' << index << ']';
    return s.str();
}

// `where`: the tiers' place in the file, "policies.api.ip" or "plans.pro.user".
void check_cost(const node_ref& at, std::int64_t cost, const std::vector<tier_config>& tiers,
                const std::string& where) {
    for (std::size_t i = 0; i < tiers.size(); ++i) {
        const tier_config& t = tiers[i];
        if (t.algo == algorithm::concurrency) continue;  // a request takes one slot, whatever its cost
        if (cost > t.limit) at.fail(cost_exceeds(cost, "limit", t.limit, where, i));
        if (t.algo == algorithm::gcra && cost > t.burst) at.fail(cost_exceeds(cost, "burst", t.burst, where, i));
    }
}

// A cost (a route's, or the most an upstream may report) must fit every tier it may meet.
void check_cost_fits(const config& c, const node_ref& at, std::int64_t cost, const policy_config& p) {
    check_cost(at, cost, p.ip, "policies." + p.name + ".ip");
    check_cost(at, cost, p.user, "policies." + p.name + ".user");
    if (!p.user_by_plan) return;
    for (const auto& plan : c.plans) check_cost(at, cost, plan.user, "plans." + plan.name + ".user");
}

void check_routes(const config& c, const std::vector<route_nodes>& at) {
    for (std::size_t i = 0; i < c.routes.size(); ++i) {
        const route_config& r = c.routes[i];
        if (r.policy == "none") {
            if (at[i].cost_header) at[i].cost_header->fail_at_key(cost_header_needs_policy);
            continue;
        }
        const policy_config* p = c.find_policy(r.policy);
        if (p == nullptr) at[i].policy->fail("no policy named \"" + r.policy + "\"");
        if (at[i].cost) check_cost_fits(c, *at[i].cost, r.cost, *p);
        if (at[i].max_cost) check_cost_fits(c, *at[i].max_cost, r.max_cost, *p);
    }
}

// --- the file ---

void read_config(const node_ref& root, config& out) {
    if (!root.node().IsMap()) root.fail("expected a mapping");
    std::vector<route_nodes> route_nodes;
    read_mapping(root, {
                           {"server", [&](const node_ref& v) { read_server(v, out.server); }},
                           {"admin", [&](const node_ref& v) { read_admin(v, out.admin); }},
                           {"upstream", [&](const node_ref& v) { read_upstream(v, out.upstream); }, presence::required},
                           {"proxy", [&](const node_ref& v) { read_proxy(v, out.proxy); }},
                           {"log", [&](const node_ref& v) { read_log(v, out.log); }},
                           {"store", [&](const node_ref& v) { read_store(v, out.store); }},
                           {"clients", [&](const node_ref& v) { read_clients(v, out.clients); }},
                           {"response", [&](const node_ref& v) { read_response(v, out.response); }},
                           {"plans", [&](const node_ref& v) { read_plans(v, out.plans); }},
                           {"policies", [&](const node_ref& v) { read_policies(v, out.policies); }},
                           {"routes", [&](const node_ref& v) { read_routes(v, out.routes, route_nodes); }},
                       });
    check_plans(out);
    check_routes(out, route_nodes);
}

// Counts documents, stopping at the second: yaml-cpp 0.7's LoadAll() never ends on some
// malformed input (a lone ",": it yields empty documents without consuming anything).
class document_counter : public YAML::EventHandler {
public:
    int documents = 0;
    YAML::Mark second{};
    void OnDocumentStart(const YAML::Mark& mark) override {
        if (++documents == 2) second = mark;
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

// The single document of the file; an empty file is an empty (null) document.
YAML::Node parse_document(const std::string& text, const std::string& name) {
    try {
        std::istringstream in(text);
        YAML::Parser parser(in);
        document_counter counter;
        while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
        }
        if (counter.documents > 1) schema::throw_error(name, counter.second, "(yaml)", expected_single_document);
        return YAML::Load(text);
    } catch (const YAML::Exception& e) {
        schema::throw_error(name, e.mark, "(yaml)", e.msg);
    }
}

}  // namespace

const plan_config* config::find_plan(std::string_view name) const {
    auto it = std::find_if(plans.begin(), plans.end(), [&](const plan_config& p) { return p.name == name; });
    return it == plans.end() ? nullptr : &*it;
}

const policy_config* config::find_policy(std::string_view name) const {
    auto it = std::find_if(policies.begin(), policies.end(), [&](const policy_config& p) { return p.name == name; });
    return it == policies.end() ? nullptr : &*it;
}

std::string address::to_string() const {
    bool v6 = host.find(':') != std::string::npos;
    std::string out = v6 ? "[" + host + "]" : host;
    return out + ":" + std::to_string(port);
}

std::shared_ptr<const config> load_string(std::string_view yaml, const std::string& name) {
    YAML::Node doc = parse_document(std::string(yaml), name);
    auto out = std::make_shared<config>();
    out->source = name;
    read_config(node_ref(doc, name), *out);
    return out;
}

std::shared_ptr<const config> load_file(const std::string& path) { return load_string(read_stable_file(path), path); }

std::optional<duration> parse_duration(std::string_view s) { return parse_duration_why(s).value; }

std::optional<std::uint64_t> parse_size(std::string_view s) { return parse_size_why(s).value; }

std::optional<address> parse_address(std::string_view s) { return parse_address_why(s).value; }

std::optional<upstream_url> parse_upstream_url(std::string_view s) { return parse_upstream_url_why(s).value; }

std::optional<cidr> parse_cidr(std::string_view s) { return parse_cidr_why(s).value; }

std::optional<host_port> parse_host_port(std::string_view s) { return parse_host_port_why(s).value; }

std::string format_duration(duration d) {
    for (const duration_unit& u : duration_units) {
        auto ms = static_cast<duration::rep>(u.ms);
        if (d.count() % ms == 0 && (d.count() != 0 || u.ms == 1)) {
            return std::to_string(d.count() / ms) + std::string(u.name);
        }
    }
    return {};  // unreachable: every count is a multiple of 1ms
}

std::string_view to_string(algorithm a) { return algorithm_names[static_cast<std::size_t>(a)]; }

}  // namespace sluice::config
