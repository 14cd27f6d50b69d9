// Scalars as written in the config: durations, sizes, addresses, URLs, networks, names.
// Each *_why parser returns the value or the reason it was refused; the public parse_*
// functions (config.hpp) drop the reason.
#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

#include <boost/asio/ip/network_v4.hpp>
#include <boost/asio/ip/network_v6.hpp>
#include <boost/url/parse.hpp>

#include "base/text.hpp"
#include "config/readers.hpp"

namespace sluice::config {

namespace detail {

namespace {

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

bool is_ascii_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

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
    if (!u.has_port()) return static_cast<std::uint16_t>(u.scheme_id() == boost::urls::scheme::https ? 443 : 80);
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
    if (u.scheme_id() != boost::urls::scheme::http && u.scheme_id() != boost::urls::scheme::https) return not_http_url;
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

}  // namespace

parsed<duration> parse_duration_why(std::string_view s) {
    auto n = split_number(s);
    if (!n) return bad_duration;
    auto unit = duration_unit_ms(n->unit);
    if (!unit) return bad_duration;
    if (!n->number || *n->number > max_duration_ms / *unit) return duration_too_large;
    return duration(static_cast<duration::rep>(*n->number * *unit));
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

parsed<address> parse_address_why(std::string_view s) {
    auto parts = split_host_port(s);
    if (!parts) return bad_address;
    if (parts->needs_brackets()) return ipv6_needs_brackets;
    return make_address(parts->host, parts->port, parts->bracketed ? AF_INET6 : AF_INET);
}

bool is_dns_name(std::string_view host) {
    return !host.empty() && std::all_of(host.begin(), host.end(),
                                        [](char c) { return is_ascii_alnum(c) || c == '-' || c == '.' || c == '_'; });
}

bool is_token(std::string_view s) { return base::is_token(s); }

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

bool is_loopback(std::string_view host) {
    boost::system::error_code ec;
    const auto a = boost::asio::ip::make_address(std::string(host), ec);
    return !ec && a.is_loopback();
}

bool is_bearer_token(std::string_view s) {
    if (s.size() < 16 || s.size() > 4096) return false;
    std::size_t end = s.size();
    while (end > 0 && s[end - 1] == '=') --end;
    if (end == 0) return false;
    return std::all_of(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(end), [](char c) {
        return is_ascii_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
    });
}

std::string to_lower(std::string s) {
    for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    return s;
}

std::string to_upper(std::string s) {
    for (char& c : s) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
    return s;
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
                        std::string(u.encoded_authority()), u.scheme_id() == boost::urls::scheme::https};
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

}  // namespace detail

std::string address::to_string() const {
    bool v6 = host.find(':') != std::string::npos;
    std::string out = v6 ? "[" + host + "]" : host;
    return out + ":" + std::to_string(port);
}

std::optional<duration> parse_duration(std::string_view s) { return detail::parse_duration_why(s).value; }

std::optional<std::uint64_t> parse_size(std::string_view s) { return detail::parse_size_why(s).value; }

std::optional<address> parse_address(std::string_view s) { return detail::parse_address_why(s).value; }

std::optional<upstream_url> parse_upstream_url(std::string_view s) { return detail::parse_upstream_url_why(s).value; }

std::optional<cidr> parse_cidr(std::string_view s) { return detail::parse_cidr_why(s).value; }

std::optional<host_port> parse_host_port(std::string_view s) { return detail::parse_host_port_why(s).value; }

std::string format_duration(duration d) {
    for (const detail::duration_unit& u : detail::duration_units) {
        auto ms = static_cast<duration::rep>(u.ms);
        if (d.count() % ms == 0 && (d.count() != 0 || u.ms == 1)) {
            return std::to_string(d.count() / ms) + std::string(u.name);
        }
    }
    return {};  // unreachable: every count is a multiple of 1ms
}

}  // namespace sluice::config
