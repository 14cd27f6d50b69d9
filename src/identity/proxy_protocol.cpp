#include "identity/proxy_protocol.hpp"

#include <algorithm>
#include <array>

namespace sluice::identity {

namespace {

constexpr std::size_t v1_min = 15;  // "PROXY UNKNOWN\r\n"

proxy_error error(std::string_view reason) { return {reason}; }

// The whole of `s` as an IPv4 (or IPv6) literal as v1 writes it: no brackets, no zone id.
bool parse_v1_address(std::string_view s, bool v6, address& out) {
    constexpr std::size_t max_len = 45;
    if (s.empty() || s.size() > max_len) return false;
    std::array<char, max_len + 1> buf{};
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        const bool ok = (c >= '0' && c <= '9') || c == '.' ||
                        (v6 && (c == ':' || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
        if (!ok) return false;
        buf[i] = c;
    }
    boost::system::error_code ec;
    if (v6) {
        auto a = boost::asio::ip::make_address_v6(buf.data(), ec);
        if (ec) return false;
        out = a;
    } else {
        auto a = boost::asio::ip::make_address_v4(buf.data(), ec);  // inet_pton: no leading zeros
        if (ec) return false;
        out = a;
    }
    return true;
}

// Decimal 0-65535, without sign, blanks or leading zeros.
bool parse_v1_port(std::string_view s, std::uint16_t& out) {
    if (s.empty() || s.size() > 5 || (s.size() > 1 && s[0] == '0')) return false;
    std::uint32_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<std::uint32_t>(c - '0');
    }
    if (v > 65535) return false;
    out = static_cast<std::uint16_t>(v);
    return true;
}

// The line between "PROXY " and CRLF.
proxy_parse parse_v1_line(std::string_view line, std::size_t length) {
    proxy_header h;
    h.version = 1;
    h.length = length;
    if (line == "UNKNOWN" || line.starts_with("UNKNOWN ")) return h;  // the rest is ignored
    const bool v6 = line.starts_with("TCP6 ");
    if (!v6 && !line.starts_with("TCP4 ")) return error("v1: unknown protocol, expected TCP4, TCP6 or UNKNOWN");
    line.remove_prefix(5);
    std::array<std::string_view, 4> f;
    for (std::size_t i = 0; i < f.size(); ++i) {
        const auto sp = line.find(' ');
        if (i + 1 < f.size() && sp == std::string_view::npos) return error("v1: expected four fields");
        f[i] = line.substr(0, sp);
        if (f[i].empty()) return error("v1: empty field (fields are separated by one space)");
        line = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
        if (i + 1 == f.size() && sp != std::string_view::npos) return error("v1: expected four fields");
    }
    address src, dst;
    if (!parse_v1_address(f[0], v6, src) || !parse_v1_address(f[1], v6, dst))
        return error(v6 ? "v1: bad address for TCP6" : "v1: bad address for TCP4");
    std::uint16_t dport = 0;
    if (!parse_v1_port(f[2], h.source_port) || !parse_v1_port(f[3], dport)) return error("v1: bad port");
    h.cmd = proxy_header::command::proxy;
    h.source = normalize(src);
    return h;
}

// `b` begins with (a prefix of) "PROXY ".
proxy_parse parse_v1(std::string_view b) {
    const std::size_t window = std::min(b.size(), proxy_v1_max);
    for (std::size_t i = 0; i < window; ++i) {
        if (b[i] == '\n') return error("v1: LF without CR");
        if (b[i] != '\r') continue;
        if (i + 2 > proxy_v1_max) return error("v1: no CRLF within 107 bytes");
        if (i + 1 == b.size()) return proxy_need_more{1};
        if (b[i + 1] != '\n') return error("v1: CR without LF");
        if (i < proxy_v1_signature.size()) return error("v1: truncated line");
        return parse_v1_line(b.substr(proxy_v1_signature.size(), i - proxy_v1_signature.size()), i + 2);
    }
    if (b.size() >= proxy_v1_max) return error("v1: no CRLF within 107 bytes");
    return proxy_need_more{b.size() < v1_min ? v1_min - b.size() : 1};
}

std::uint16_t be16(std::string_view b, std::size_t at) {
    return static_cast<std::uint16_t>((static_cast<unsigned char>(b[at]) << 8) | static_cast<unsigned char>(b[at + 1]));
}

// `b` begins with the whole v2 signature.
proxy_parse parse_v2(std::string_view b) {
    if (b.size() < proxy_v2_prefix) return proxy_need_more{proxy_v2_prefix - b.size()};
    const auto ver_cmd = static_cast<unsigned char>(b[12]);
    const auto fam = static_cast<unsigned char>(b[13]);
    if ((ver_cmd >> 4) != 2) return error("v2: bad version");
    const unsigned cmd = ver_cmd & 0x0f;
    if (cmd > 1) return error("v2: bad command");
    const std::size_t total = proxy_v2_prefix + be16(b, 14);
    const bool local = cmd == 0;  // the family and addresses are ignored, whatever they are
    const unsigned family = fam >> 4, transport = fam & 0x0f;
    std::size_t addresses = 0;
    if (!local) {
        if (family > 3) return error("v2: bad address family");
        if (transport > 2) return error("v2: bad transport protocol");
        if (family == 1 || family == 2) {
            if (transport != 1) return error("v2: an IP source must be STREAM");
            addresses = family == 1 ? 12 : 36;
            if (total - proxy_v2_prefix < addresses) return error("v2: length too short for the address family");
        }
    }
    if (b.size() < total) return proxy_need_more{total - b.size()};
    proxy_header h;
    h.version = 2;
    h.length = total;
    if (addresses == 0) return h;  // LOCAL, UNSPEC, UNIX: no source to take
    const std::string_view a = b.substr(proxy_v2_prefix, addresses);
    if (family == 1) {
        boost::asio::ip::address_v4::bytes_type src;
        std::copy_n(a.begin(), src.size(), reinterpret_cast<char*>(src.data()));
        h.source = boost::asio::ip::address_v4(src);
        h.source_port = be16(a, 8);
    } else {
        boost::asio::ip::address_v6::bytes_type src;
        std::copy_n(a.begin(), src.size(), reinterpret_cast<char*>(src.data()));
        h.source = normalize(boost::asio::ip::address_v6(src));
        h.source_port = be16(a, 32);
    }
    // TLVs (type, 16-bit length, value) fill the rest exactly; none is read.
    for (std::size_t at = proxy_v2_prefix + addresses; at < total;) {
        if (total - at < 3) return error("v2: truncated TLV");
        const std::size_t next = at + 3 + be16(b, at + 1);
        if (next > total) return error("v2: TLV overruns the header");
        at = next;
    }
    h.cmd = proxy_header::command::proxy;
    return h;
}

}  // namespace

proxy_parse parse_proxy_header(std::string_view b) {
    if (b.empty()) return proxy_need_more{v1_min};
    if (b[0] == 'P') {
        const std::size_t n = std::min(b.size(), proxy_v1_signature.size());
        if (b.substr(0, n) != proxy_v1_signature.substr(0, n)) return error("no PROXY header: bad signature");
        return parse_v1(b);
    }
    const std::size_t n = std::min(b.size(), proxy_v2_signature.size());
    if (b.substr(0, n) != proxy_v2_signature.substr(0, n)) return error("no PROXY header: bad signature");
    if (b.size() < proxy_v2_signature.size()) return proxy_need_more{proxy_v2_prefix - b.size()};
    return parse_v2(b);
}

}  // namespace sluice::identity
