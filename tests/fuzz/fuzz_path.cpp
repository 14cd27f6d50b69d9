// route::parse_target: the input is one request target. Whatever it is, a target that
// parses must give a path in normal form (the form the config demands of route paths), and
// normalising that path again must change nothing: what is limited is what is forwarded.
#include "route/target.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sluice::route;

namespace {

void check(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
}

bool is_upper_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); }

bool is_unreserved(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

int hex_value(char c) { return c <= '9' ? c - '0' : c - 'A' + 10; }

// `path` without each segment's ";params", computed independently of target.cpp.
std::string without_params(std::string_view path) {
    std::string out;
    bool in_params = false;
    for (const char c : path) {
        if (c == '/') in_params = false;
        if (c == ';') in_params = true;
        if (!in_params) out += c;
    }
    return out;
}

void check_normal_form(const request_target& t) {
    const std::string_view p = t.path;
    check(p.starts_with('/'), "path starts with /");
    check(p.find("//") == std::string_view::npos, "no empty segment");
    // No segment named "." or ".." (with or without params).
    for (std::size_t at = 1; at <= p.size();) {
        const auto end = std::min(p.find('/', at), p.size());
        const auto segment = p.substr(at, end - at);
        const auto name = segment.substr(0, segment.find(';'));
        check(name != "." && name != "..", "no dot segment");
        check(!name.empty() || end == p.size(), "only the last segment may be empty");
        check(!segment.starts_with(';'), "no params on an empty segment");
        at = end + 1;
    }
    for (std::size_t i = 0; i < p.size(); ++i) {
        const auto c = static_cast<unsigned char>(p[i]);
        check(c > 0x20 && c < 0x7f && c != '\\' && c != '#' && c != '?', "path bytes");
        if (c != '%') continue;
        check(i + 2 < p.size() && is_upper_hex(p[i + 1]) && is_upper_hex(p[i + 2]), "%XX upper case");
        const char decoded = static_cast<char>(hex_value(p[i + 1]) * 16 + hex_value(p[i + 2]));
        check(!is_unreserved(decoded), "no encoded unreserved byte");
        check(decoded != '/' && decoded != '\\' && decoded != '\0', "no encoded / \\ NUL");
    }
    check(t.match_path == without_params(p), "match_path is path without params");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view raw(reinterpret_cast<const char*>(data), size);
    request_target t;
    const char* why = parse_target("GET", raw, t);

    // OPTIONS differs only for "*"; CONNECT never reads the target.
    request_target options;
    const char* options_why = parse_target("OPTIONS", raw, options);
    if (raw == "*") {
        check(why != nullptr && options_why == nullptr, "* only with OPTIONS");
        check(options.form == target_form::asterisk && options.path == "*", "asterisk form");
    } else {
        check((why == nullptr) == (options_why == nullptr), "OPTIONS parses like GET");
        check(why != nullptr || options.path == t.path, "OPTIONS path like GET");
    }
    request_target connect;
    check(parse_target("CONNECT", raw, connect) == nullptr, "CONNECT is authority-form");
    check(connect.form == target_form::authority && connect.path.empty(), "authority form");

    if (why != nullptr) return 0;
    check(t.form == target_form::origin || t.form == target_form::absolute, "form");
    check(t.form == target_form::absolute || (t.host.empty() && t.authority.empty()), "no host");
    check(t.query.empty() || (t.query.front() == '?' && raw.ends_with(t.query)), "query as received");
    check(t.path.size() <= std::max<std::size_t>(raw.size(), 1), "never longer");
    check_normal_form(t);

    // Idempotent: the forwarded path is its own normal form.
    request_target again;
    check(parse_target("GET", t.path, again) == nullptr, "normal form parses");
    check(again.path == t.path, "idempotent path");
    check(again.match_path == t.match_path, "idempotent match_path");
    check(again.form == target_form::origin && again.query.empty(), "normal form is origin-form");

    // Reusing a target gives what a fresh one does.
    check(parse_target("GET", raw, again) == nullptr && again.path == t.path && again.match_path == t.match_path &&
              again.query == t.query && again.host == t.host && again.authority == t.authority && again.form == t.form,
          "reuse");
    return 0;
}
