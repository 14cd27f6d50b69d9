#include "identity/address.hpp"

#include "base/text.hpp"

#include <algorithm>
#include <cstring>

namespace sluice::identity {

namespace {

using base::iequals;
using base::is_ows;
using base::is_tchar;
using base::trim;

using forwarded_kind = config::clients_config::forwarded_kind;

// An IP literal without brackets, port or zone id. No allocation.
bool parse_literal(std::string_view s, address& out) {
    constexpr std::size_t max_len = 45;  // "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
    if (s.empty() || s.size() > max_len) return false;
    char buf[max_len + 1];
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        const bool ok =
            (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '.' || c == ':';
        if (!ok) return false;  // also rejects '%' zone ids and embedded NULs
        buf[i] = c;
    }
    buf[s.size()] = '\0';
    boost::system::error_code ec;
    address a = boost::asio::ip::make_address(static_cast<const char*>(buf), ec);
    if (ec) return false;
    out = a;  // not yet normalised: callers check the family as written
    return true;
}

bool all_digits(std::string_view s, std::size_t max) {
    if (s.empty() || s.size() > max) return false;
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "[v6]" or "[v6]:port" (port accepted by `port_ok`), or "v4" / "v4:port", or a bare
// v6 literal when `bare_v6` is set.
template <class PortOk>
bool parse_host_port(std::string_view s, address& out, bool bare_v6, PortOk port_ok) {
    if (s.empty()) return false;
    if (s.front() == '[') {
        const auto close = s.find(']');
        if (close == std::string_view::npos) return false;
        const auto rest = s.substr(close + 1);
        if (!rest.empty() && (rest.front() != ':' || !port_ok(rest.substr(1)))) return false;
        address a;
        if (!parse_literal(s.substr(1, close - 1), a) || !a.is_v6()) return false;
        // "[::ffff:1.2.3.4]" is accepted: it is IPv6 syntax, normalised to IPv4.
        out = normalize(a);
        return true;
    }
    const auto colons = std::count(s.begin(), s.end(), ':');
    if (colons == 1) {  // v4:port
        const auto c = s.find(':');
        if (!port_ok(s.substr(c + 1))) return false;
        address a;
        if (!parse_literal(s.substr(0, c), a)) return false;
        if (!a.is_v4()) return false;
        out = a;
        return true;
    }
    if (colons > 1 && !bare_v6) return false;
    address a;
    if (!parse_literal(s, a)) return false;
    out = normalize(a);
    return true;
}

struct hop {
    bool valid = false;
    address addr;
};

// Parses one Forwarded field value into its elements' for= nodes, left to right. A
// syntax error appends one invalid hop and stops: what follows cannot be delimited.
void parse_forwarded_field(std::string_view s, std::vector<hop>& hops) {
    std::size_t i = 0;
    const std::size_t n = s.size();
    auto skip_ows = [&] {
        while (i < n && is_ows(s[i])) ++i;
    };
    auto fail = [&] { hops.push_back(hop{}); };
    while (i <= n) {
        // One element: pairs separated by ';', ended by ',' or the end.
        bool any_pair = false, bad = false, have_for = false;
        std::string_view for_value;
        skip_ows();
        while (i < n && s[i] != ',') {
            if (s[i] == ';') {  // empty pair
                ++i;
                skip_ows();
                continue;
            }
            const std::size_t name_start = i;
            while (i < n && is_tchar(s[i])) ++i;
            const std::string_view name = s.substr(name_start, i - name_start);
            if (name.empty() || i >= n || s[i] != '=') return fail();
            ++i;
            std::string_view value;
            bool value_bad = false;
            if (i < n && s[i] == '"') {
                const std::size_t start = ++i;
                bool closed = false;
                while (i < n) {
                    if (s[i] == '\\') {
                        value_bad = true;  // a node never needs escapes
                        i += 2;
                        continue;
                    }
                    if (s[i] == '"') {
                        closed = true;
                        break;
                    }
                    ++i;
                }
                if (!closed) return fail();
                value = s.substr(start, i - start);
                ++i;  // closing quote
            } else {
                // Token; ':' '[' ']' are tolerated unquoted (strictly they need quotes).
                const std::size_t start = i;
                while (i < n && (is_tchar(s[i]) || s[i] == ':' || s[i] == '[' || s[i] == ']')) ++i;
                value = s.substr(start, i - start);
                if (value.empty()) return fail();
            }
            any_pair = true;
            if (iequals(name, "for")) {
                if (have_for) bad = true;
                have_for = true;
                for_value = value;
                if (value_bad) bad = true;
            }
            skip_ows();
            if (i < n && s[i] == ';') {
                ++i;
                skip_ows();
            } else if (i < n && s[i] != ',') {
                return fail();
            }
        }
        if (any_pair) {
            hop h;
            h.valid = !bad && have_for && parse_forwarded_node(for_value, h.addr);
            hops.push_back(h);
        }
        if (i >= n) break;
        ++i;  // ','
    }
}

}  // namespace

address normalize(const address& a) {
    if (a.is_v6()) {
        const auto v6 = a.to_v6();
        if (v6.is_v4_mapped()) return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, v6);
    }
    return a;
}

namespace {

std::uint32_t mask32(unsigned prefix) {
    return prefix == 0 ? 0 : prefix >= 32 ? 0xffffffffu : ~(0xffffffffu >> prefix);
}
std::uint64_t mask64(unsigned prefix) {
    return prefix == 0 ? 0 : prefix >= 64 ? ~std::uint64_t{0} : ~(~std::uint64_t{0} >> prefix);
}
std::uint64_t load64(const std::array<unsigned char, 16>& b, std::size_t off) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) v = (v << 8) | b[off + i];
    return v;
}

}  // namespace

cidr_set::cidr_set(const std::vector<config::cidr>& nets) {
    for (const auto& c : nets) {
        address net = c.network;
        unsigned prefix = c.prefix;
        if (net.is_v6() && net.to_v6().is_v4_mapped() && prefix >= 96) {
            net = normalize(net);
            prefix -= 96;
        }
        if (net.is_v4()) {
            const auto m = mask32(std::min(prefix, 32u));
            v4_.push_back({static_cast<std::uint32_t>(net.to_v4().to_uint()) & m, m});
        } else {
            const auto b = net.to_v6().to_bytes();
            const unsigned p = std::min(prefix, 128u);
            const auto mh = mask64(std::min(p, 64u));
            const auto ml = mask64(p > 64 ? p - 64 : 0);
            v6_.push_back({load64(b, 0) & mh, load64(b, 8) & ml, mh, ml});
        }
    }
}

bool cidr_set::contains(const address& a0) const {
    const address a = normalize(a0);
    if (a.is_v4()) {
        const auto v = static_cast<std::uint32_t>(a.to_v4().to_uint());
        for (const auto& n : v4_)
            if ((v & n.mask) == n.network) return true;
        return false;
    }
    const auto b = a.to_v6().to_bytes();
    const auto hi = load64(b, 0), lo = load64(b, 8);
    for (const auto& n : v6_)
        if ((hi & n.mask_hi) == n.network_hi && (lo & n.mask_lo) == n.network_lo) return true;
    return false;
}

bool parse_xff_entry(std::string_view s, address& out) {
    return parse_host_port(trim(s), out, true, [](std::string_view p) { return all_digits(p, 5); });
}

bool parse_forwarded_node(std::string_view s, address& out) {
    // node-port = port / obfport; a port never changes who the client is.
    auto port_ok = [](std::string_view p) {
        if (all_digits(p, 5)) return true;
        if (p.size() < 2 || p.front() != '_') return false;
        return std::all_of(p.begin() + 1, p.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                   c == '-';
        });
    };
    // Unbracketed IPv6 is not a valid node; "unknown" and "_obf" fail the literal parse.
    return parse_host_port(s, out, false, port_ok);
}

address client_address(const address& peer0, const std::vector<std::string_view>& header_values, forwarded_kind kind,
                       const cidr_set& trusted) {
    address peer = normalize(peer0);
    if (kind == forwarded_kind::none || header_values.empty() || !trusted.contains(peer)) return peer;

    address current = peer;  // the last trusted hop examined
    if (kind == forwarded_kind::x_forwarded_for) {
        for (auto f = header_values.rbegin(); f != header_values.rend(); ++f) {
            std::string_view field = *f;
            while (true) {
                const auto comma = field.rfind(',');
                const std::string_view entry = trim(comma == std::string_view::npos ? field : field.substr(comma + 1));
                if (!entry.empty()) {
                    address a;
                    if (!parse_xff_entry(entry, a)) return current;
                    if (!trusted.contains(a)) return a;
                    current = a;
                }
                if (comma == std::string_view::npos) break;
                field = field.substr(0, comma);
            }
        }
        return current;
    }

    std::vector<hop> hops;
    for (auto f = header_values.rbegin(); f != header_values.rend(); ++f) {
        hops.clear();
        parse_forwarded_field(*f, hops);
        for (auto h = hops.rbegin(); h != hops.rend(); ++h) {
            if (!h->valid) return current;
            if (!trusted.contains(h->addr)) return h->addr;
            current = h->addr;
        }
    }
    return current;
}

std::optional<address> forwarded_client(const std::vector<std::string_view>& xff_values, std::string_view real_ip,
                                        const cidr_set& trusted) {
    std::optional<address> current;  // the last trusted hop examined
    bool any = false;
    for (auto f = xff_values.rbegin(); f != xff_values.rend(); ++f) {
        std::string_view field = *f;
        while (true) {
            const auto comma = field.rfind(',');
            const std::string_view entry = trim(comma == std::string_view::npos ? field : field.substr(comma + 1));
            if (!entry.empty()) {
                any = true;
                address a;
                if (!parse_xff_entry(entry, a)) return current;
                a = normalize(a);
                if (!trusted.contains(a)) return a;
                current = a;
            }
            if (comma == std::string_view::npos) break;
            field = field.substr(0, comma);
        }
    }
    if (any) return current;
    address a;
    if (!parse_xff_entry(trim(real_ip), a)) return std::nullopt;
    return normalize(a);
}

std::string ip_identifier(const address& a0, unsigned ipv6_prefix) {
    const address a = normalize(a0);
    if (a.is_v4()) return a.to_v4().to_string();
    const unsigned prefix = std::clamp(ipv6_prefix, 1u, 128u);
    auto bytes = a.to_v6().to_bytes();
    for (unsigned i = 0; i < 16; ++i) {
        const unsigned bit = i * 8;
        if (bit >= prefix)
            bytes[i] = 0;
        else if (prefix - bit < 8)
            bytes[i] &= static_cast<unsigned char>(0xff << (8 - (prefix - bit)));
    }
    std::string out = boost::asio::ip::address_v6(bytes).to_string();
    if (prefix < 128) {
        out += '/';
        out += std::to_string(prefix);
    }
    return out;
}

}  // namespace sluice::identity
