// Text helpers every module may use: ASCII only, no locale, no allocation but the appends.
//
// Thread: pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace sluice::base {

// Optional white space of HTTP (RFC 9110 section 5.6.3): space and horizontal tab.
constexpr bool is_ows(char c) { return c == ' ' || c == '\t'; }

constexpr std::string_view trim(std::string_view s) {
    while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
    return s;
}

constexpr char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

constexpr bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
    return true;
}

// A character of an RFC 9110 token (field names, methods, parameter names).
constexpr bool is_tchar(char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

constexpr bool is_token(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!is_tchar(c)) return false;
    return true;
}

// Whether a certificate name covers `host` (both lower case): equal, or a wildcard
// "*.example.com" for exactly one label before "example.com" (RFC 6125 6.4.3, the
// left-most label only).
constexpr bool name_covers(std::string_view name, std::string_view host) {
    if (name == host) return true;
    if (name.size() < 3 || name.substr(0, 2) != "*.") return false;
    const auto dot = host.find('.');
    return dot != std::string_view::npos && dot > 0 && host.substr(dot) == name.substr(1);
}

inline constexpr char hex_digits[] = "0123456789abcdef";

// Two lower-case hex digits per byte.
inline void append_hex(std::string& out, std::span<const unsigned char> bytes) {
    for (unsigned char b : bytes) {
        out += hex_digits[b >> 4];
        out += hex_digits[b & 0x0f];
    }
}

// n in lower-case hex, without leading zeros ("0" for 0): a chunk size.
inline void append_hex(std::string& out, std::uint64_t n) {
    char buf[16];
    char* p = buf + sizeof buf;
    do {
        *--p = hex_digits[n & 15];
        n >>= 4;
    } while (n != 0);
    out.append(p, buf + sizeof buf);
}

}  // namespace sluice::base
