#include "route/target.hpp"

#include "base/text.hpp"

#include <array>

#include <boost/url/authority_view.hpp>

namespace sluice::route {

namespace {

using base::ascii_lower;
using base::iequals;

constexpr const char* no_known_form = "malformed request target";
constexpr const char* asterisk_not_options = "asterisk-form target is only allowed with OPTIONS";
constexpr const char* unsupported_scheme = "absolute-form target must use http or https";
constexpr const char* userinfo_in_target = "userinfo in request target";
constexpr const char* bad_authority = "invalid authority in request target";
constexpr const char* bad_host = "invalid host in request target";
constexpr const char* bad_port = "invalid port in request target";
constexpr const char* bad_escape = "invalid percent-encoding in path";
constexpr const char* encoded_separator = "encoded / or \\ in path";
constexpr const char* encoded_nul = "encoded NUL in path";
constexpr const char* raw_backslash = "backslash in path";
constexpr const char* fragment = "fragment in request target";
constexpr const char* bad_path_byte = "control, space or non-ASCII byte in path";
constexpr const char* bad_query_byte = "control or space byte in query";

constexpr char upper_hex[] = "0123456789ABCDEF";

bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

// RFC 3986 2.3.
bool is_unreserved(unsigned char c) {
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// "/a/b" -> "/a"; "/a" -> "".
void drop_last_segment(std::string& s) {
    const auto slash = s.rfind('/');
    s.resize(slash == std::string::npos ? 0 : slash);
}

// Bytes copied as they are: printable ASCII but for those normalise_path() looks at.
constexpr auto plain_bytes = [] {
    std::array<bool, 256> t{};
    for (int c = 0x21; c < 0x7f; ++c) t[c] = true;
    for (const char c : {'%', ';', '/', '\\', '#'}) t[static_cast<unsigned char>(c)] = false;
    return t;
}();

// The "%XX" at the front of `s`: an unreserved byte decoded, any other kept upper-cased.
const char* append_escape(std::string_view s, bool in_params, std::string& path, std::string& match) {
    const int hi = s.size() > 2 ? hex_value(s[1]) : -1;
    const int lo = s.size() > 2 ? hex_value(s[2]) : -1;
    if (hi < 0 || lo < 0) return bad_escape;
    const auto c = static_cast<unsigned char>(hi * 16 + lo);
    if (c == '/' || c == '\\') return encoded_separator;
    if (c == 0) return encoded_nul;
    if (is_unreserved(c)) {
        path += static_cast<char>(c);
        if (!in_params) match += static_cast<char>(c);
        return nullptr;
    }
    const char escape[3] = {'%', upper_hex[hi], upper_hex[lo]};
    path.append(escape, 3);
    if (!in_params) match.append(escape, 3);
    return nullptr;
}

// Appends the normalised form of `p` (an absolute path without query) to `path`, and the
// same without ";params" to `match`, one segment at a time. Between segments both hold
// "" or "/name/name...": no empty, "." or ".." segment, so ".." drops exactly one.
const char* normalise_path(std::string_view p, std::string& path, std::string& match) {
    std::size_t i = 1;  // past the leading '/'
    for (;;) {
        const std::size_t path_mark = path.size();
        const std::size_t match_mark = match.size();
        path += '/';
        match += '/';
        bool in_params = false;
        while (i < p.size() && p[i] != '/') {
            const std::size_t run = i;
            while (i < p.size() && plain_bytes[static_cast<unsigned char>(p[i])]) ++i;
            if (i > run) {
                path.append(p.data() + run, i - run);
                if (!in_params) match.append(p.data() + run, i - run);
            } else if (p[i] == ';') {
                in_params = true;
                path += ';';
                ++i;
            } else if (p[i] == '%') {
                if (const char* why = append_escape(p.substr(i), in_params, path, match)) return why;
                i += 3;
            } else {
                return p[i] == '\\' ? raw_backslash : p[i] == '#' ? fragment : bad_path_byte;
            }
        }
        const bool last = i >= p.size();
        const std::string_view name(match.data() + match_mark + 1, match.size() - match_mark - 1);
        // A segment named "." or ".." counts as a dot segment whatever its params (a
        // servlet container strips ";x" before resolving "..;x").
        if (name.empty() || name == "." || name == "..") {
            const bool up = name.size() == 2;
            path.resize(path_mark);
            match.resize(match_mark);
            if (up) {
                drop_last_segment(path);
                drop_last_segment(match);
            }
            if (last) {  // "/a/", "/a/." and "/a/b/.." all end in a directory
                path += '/';
                match += '/';
            }
        }
        if (last) return nullptr;
        ++i;
    }
}

bool is_host_name(std::string_view s) {
    if (s.empty()) return false;
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (!is_alpha(c) && !is_digit(c) && c != '-' && c != '.' && c != '_') return false;
    }
    return true;
}

// "http://host[:port]" at the start of `raw` into `out`; `rest` gets what follows it.
const char* parse_absolute(std::string_view raw, request_target& out, std::string_view& rest) {
    const auto scheme_end = raw.find("://");
    if (scheme_end == std::string_view::npos) return no_known_form;
    const auto scheme = raw.substr(0, scheme_end);
    if (!iequals(scheme, "http") && !iequals(scheme, "https")) return unsupported_scheme;
    const auto after = raw.substr(scheme_end + 3);
    const auto end = after.find_first_of("/?");
    const auto authority = after.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : after.substr(end);

    if (authority.find('@') != std::string_view::npos) return userinfo_in_target;
    const auto parsed = boost::urls::parse_authority(authority);
    if (!parsed) return bad_authority;
    const std::string_view host = parsed->encoded_host();
    switch (parsed->host_type()) {
        case boost::urls::host_type::ipv4:
        case boost::urls::host_type::ipv6: break;
        case boost::urls::host_type::name:
            if (!is_host_name(host)) return bad_host;
            break;
        default: return bad_host;
    }
    if (parsed->has_port()) {
        const std::string_view port = parsed->port();  // *DIGIT, may be empty
        std::uint32_t n = 0;
        for (const char c : port) {
            n = n * 10 + static_cast<std::uint32_t>(c - '0');
            if (n > 65535) return bad_port;
        }
    }
    out.form = target_form::absolute;
    for (const char c : host) out.host += ascii_lower(c);
    out.authority.assign(authority);
    return nullptr;
}

}  // namespace

void request_target::clear() {
    form = target_form::origin;
    path.clear();
    query.clear();
    host.clear();
    authority.clear();
    match_path.clear();
}

const char* parse_target(std::string_view method, std::string_view raw, request_target& out) {
    out.clear();
    if (method == "CONNECT") {
        out.form = target_form::authority;
        return nullptr;
    }
    if (raw == "*") {
        if (method != "OPTIONS") return asterisk_not_options;
        out.form = target_form::asterisk;
        out.path.push_back('*');  // not `= "*"`: a false -Wrestrict in GCC 12
        out.match_path.push_back('*');
        return nullptr;
    }
    std::string_view rest = raw;
    if (!raw.starts_with('/')) {
        if (const char* why = parse_absolute(raw, out, rest)) return why;
    }
    const auto q = rest.find('?');
    std::string_view p = rest.substr(0, q);
    if (q != std::string_view::npos) {
        const auto query = rest.substr(q);
        for (const char ch : query) {
            const auto c = static_cast<unsigned char>(ch);
            if (c <= 0x20 || c == 0x7f) return bad_query_byte;
            // Some servers end the query there, others not: a query: limit and the upstream
            // could read different values.
            if (ch == '#') return fragment;
        }
        out.query.assign(query);
    }
    if (p.empty()) p = "/";      // absolute-form with an empty path
    out.path.reserve(p.size());  // normalising never lengthens a path
    out.match_path.reserve(p.size());
    return normalise_path(p, out.path, out.match_path);
}

}  // namespace sluice::route
