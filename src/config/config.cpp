// Loading and validating the Sluice config. The scalar parsers below return a value or
// the reason it was refused; the YAML readers turn that reason into a config_error at the
// value's position, and the public parse_* functions drop it.
#include "config/config.hpp"

#include <arpa/inet.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <boost/url/parse.hpp>
#include <yaml-cpp/yaml.h>

#include "config/yaml_schema.hpp"

namespace sluice::config {

namespace {

using schema::field;
using schema::node_ref;
using schema::presence;
using schema::read_mapping;

// Reasons, in one place so that the wording stays consistent: "expected ..." when the
// value has the wrong shape, "must ..." when it has the right shape but a bad value.
constexpr std::string_view bad_duration = "expected a duration like 250ms, 1s, 5m, 1h";
constexpr std::string_view duration_too_large = "duration is too large";
constexpr std::string_view not_positive = "must be greater than 0";
constexpr std::string_view bad_size = "expected a size like 16384, 64KiB, 10MiB, 1GiB";
constexpr std::string_view ambiguous_size_unit = "ambiguous unit, use KiB, MiB or GiB";
constexpr std::string_view size_too_large = "size is too large";
constexpr std::string_view bad_address =
    R"(expected an address like "0.0.0.0:8080" or "[::1]:8080")";
constexpr std::string_view ipv6_needs_brackets =
    R"(an IPv6 address must be in brackets, like "[::1]:8080")";
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

// A parsed value, or the reason why not.
template <class T>
struct parsed {
    parsed(T v) : value(std::move(v)) {}
    parsed(std::string_view why) : reason(why) {}
    std::optional<T> value;
    std::string_view reason;
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

std::optional<std::uint64_t> parse_port(std::string_view s) {
    auto n = split_number(s);
    if (!n || !n->unit.empty()) return std::nullopt;
    return n->number.value_or(std::numeric_limits<std::uint64_t>::max());
}

// Durations are kept small enough to convert to nanoseconds without overflow.
constexpr std::uint64_t max_duration_ms = std::numeric_limits<std::int64_t>::max() / 1'000'000;

std::optional<std::uint64_t> duration_unit_ms(std::string_view unit) {
    if (unit == "ms") return 1;
    if (unit == "s") return 1000;
    if (unit == "m") return 60'000;
    if (unit == "h") return 3'600'000;
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
    if (!unit.value) return unit.reason;
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
    auto port = parse_port(port_text);
    if (!port) return bad_address;
    if (*port > 65535) return listen_port_range;
    return address{std::string(host), static_cast<std::uint16_t>(*port)};
}

parsed<address> parse_address_why(std::string_view s) {
    if (s.starts_with('[')) {
        auto close = s.find("]:");
        if (close == std::string_view::npos) return bad_address;
        return make_address(s.substr(1, close - 1), s.substr(close + 2), AF_INET6);
    }
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return bad_address;
    std::string_view host = s.substr(0, colon);
    if (host.find(':') != std::string_view::npos) return ipv6_needs_brackets;
    return make_address(host, s.substr(colon + 1), AF_INET);
}

bool is_dns_name(std::string_view host) {
    if (host.empty()) return false;
    for (char c : host) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '.' || c == '_';
        if (!ok) return false;
    }
    return true;
}

parsed<std::string> url_host_of(const boost::urls::url_view& u) {
    switch (u.host_type()) {
        case boost::urls::host_type::ipv4:
            return std::string(u.encoded_host());
        case boost::urls::host_type::ipv6:
            return std::string(u.encoded_host_address());
        case boost::urls::host_type::name:
            if (is_dns_name(u.encoded_host())) return std::string(u.encoded_host());
            return u.encoded_host().empty() ? bad_url : url_host;
        default:
            return url_host;
    }
}

parsed<std::uint16_t> url_port_of(const boost::urls::url_view& u) {
    if (!u.has_port()) return std::uint16_t{80};
    auto port = parse_port(u.port());
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

parsed<upstream_url> parse_upstream_url_why(std::string_view s) {
    auto r = boost::urls::parse_uri(s);
    if (!r) return bad_url;
    const boost::urls::url_view& u = *r;
    if (auto why = check_url_shape(u); !why.empty()) return why;
    auto host = url_host_of(u);
    if (!host.value) return host.reason;
    auto port = url_port_of(u);
    if (!port.value) return port.reason;
    return upstream_url{std::move(*host.value), *port.value, base_path_of(u.encoded_path()),
                        std::string(u.encoded_authority())};
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

address read_address(const node_ref& v) {
    return take(v, parse_address_why(v.scalar(bad_address)));
}

upstream_url read_upstream_url(const node_ref& v) {
    return take(v, parse_upstream_url_why(v.scalar(bad_url)));
}

// --- sections ---

void read_server(const node_ref& n, server_config& out) {
    read_mapping(n, {
        {"listen", [&](const node_ref& v) { out.listen = read_address(v); }},
        {"threads", [&](const node_ref& v) { out.threads = schema::read_uint_as(v, 0u, 1024u); }},
        {"max_connections",
         [&](const node_ref& v) {
             out.max_connections = schema::read_uint_as<std::size_t>(v, 1, 10'000'000);
         }},
        {"header_timeout",
         [&](const node_ref& v) { out.header_timeout = read_duration(v, zero::refused); }},
        {"idle_timeout",
         [&](const node_ref& v) { out.idle_timeout = read_duration(v, zero::refused); }},
        {"drain_timeout",
         [&](const node_ref& v) { out.drain_timeout = read_duration(v, zero::allowed); }},
        {"max_header_bytes",
         [&](const node_ref& v) { out.max_header_bytes = read_size(v, 1024, 1 << 20); }},
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
    read_mapping(n, {
        {"url", [&](const node_ref& v) { out.url = read_upstream_url(v); }, presence::required},
        {"connect_timeout",
         [&](const node_ref& v) { out.connect_timeout = read_duration(v, zero::refused); }},
        {"timeout", [&](const node_ref& v) { out.timeout = read_duration(v, zero::refused); }},
        {"max_idle_per_worker",
         [&](const node_ref& v) {
             out.max_idle_per_worker = schema::read_uint_as<std::size_t>(v, 0, 100'000);
         }},
    });
}

void read_log(const node_ref& n, log_config& out) {
    read_mapping(n, {
        {"level",
         [&](const node_ref& v) {
             out.level = schema::read_choice(v, {"trace", "debug", "info", "warn", "error", "off"});
         }},
    });
}

void read_config(const node_ref& root, config& out) {
    if (!root.node().IsMap()) root.fail("expected a mapping");
    read_mapping(root, {
        {"server", [&](const node_ref& v) { read_server(v, out.server); }},
        {"admin", [&](const node_ref& v) { read_admin(v, out.admin); }},
        {"upstream", [&](const node_ref& v) { read_upstream(v, out.upstream); },
         presence::required},
        {"log", [&](const node_ref& v) { read_log(v, out.log); }},
    });
}

// The single document of the file; an empty file is an empty (null) document.
YAML::Node parse_document(const std::string& text, const std::string& name) {
    try {
        std::vector<YAML::Node> docs = YAML::LoadAll(text);
        if (docs.size() > 1) {
            schema::throw_error(name, docs[1].Mark(), "(yaml)", expected_single_document);
        }
        return docs.empty() ? YAML::Node() : docs.front();
    } catch (const YAML::Exception& e) {
        schema::throw_error(name, e.mark, "(yaml)", e.msg);
    }
}

std::string read_whole_file(const std::string& path) {
    auto fail = [&] { throw config_error(path + ": cannot read: " + std::strerror(errno)); };
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"),
                                                     &std::fclose);
    if (!f) fail();
    std::string text;
    char buf[8192];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, f.get())) text.append(buf, n);
    if (std::ferror(f.get())) fail();
    return text;
}

}  // namespace

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

std::shared_ptr<const config> load_file(const std::string& path) {
    return load_string(read_whole_file(path), path);
}

std::optional<duration> parse_duration(std::string_view s) { return parse_duration_why(s).value; }

std::optional<std::uint64_t> parse_size(std::string_view s) { return parse_size_why(s).value; }

std::optional<address> parse_address(std::string_view s) { return parse_address_why(s).value; }

std::optional<upstream_url> parse_upstream_url(std::string_view s) {
    return parse_upstream_url_why(s).value;
}

}  // namespace sluice::config
