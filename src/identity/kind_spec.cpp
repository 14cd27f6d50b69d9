#include "identity/kind_spec.hpp"

#include "base/text.hpp"
#include "identity/address.hpp"

#include <boost/system/error_code.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>

namespace sluice::identity {

namespace {

struct keyword {
    std::string_view word;
    part_kind what;
    bool named;
};

constexpr std::array<keyword, 6> keywords{{{"ip", part_kind::ip, false},
                                           {"user", part_kind::user, false},
                                           {"route", part_kind::route, false},
                                           {"header", part_kind::header, true},
                                           {"claim", part_kind::claim, true},
                                           {"query", part_kind::query, true}}};

constexpr std::string_view expected =
    "an identifier kind is ip, user, route, header:<name>, claim:<name> or query:<name>, or distinct ones "
    "joined by '+'";

bool name_char(char c) {
    if (c == '+' || c == '%') return false;
    return base::is_tchar(c) || c == ':' || c == '/' || c == '@';
}

// One part ("ip", "header:X-Tenant") into `out`; "" or why not.
std::string parse_part(std::string_view text, kind_part& out) {
    const auto colon = text.find(':');
    const std::string_view word = text.substr(0, colon);
    const auto k = std::find_if(keywords.begin(), keywords.end(), [&](const keyword& kw) { return kw.word == word; });
    if (k == keywords.end()) return "unknown kind \"" + std::string(word) + "\": " + std::string(expected);
    out.what = k->what;
    if (!k->named) {
        if (colon != std::string_view::npos) return std::string(word) + " takes no name";
        return {};
    }
    if (colon == std::string_view::npos || colon + 1 == text.size())
        return std::string(word) + " needs a name: " + std::string(word) + ":<name>";
    const std::string_view name = text.substr(colon + 1);
    if (name.size() > max_name_length)
        return std::string(word) + " name longer than " + std::to_string(max_name_length) + " characters";
    if (k->what == part_kind::header) {
        if (!base::is_token(name)) return "header name \"" + std::string(name) + "\" is not an HTTP field name";
        out.name.clear();
        for (char c : name) out.name += base::ascii_lower(c);
        return {};
    }
    if (!std::all_of(name.begin(), name.end(), name_char))
        return std::string(word) + " name \"" + std::string(name) +
               "\" has a character other than letters, digits and !#$&'*-.^_`|~:/@";
    out.name = name;
    return {};
}

void append_part_text(std::string& out, const kind_part& p) {
    const auto k = std::find_if(keywords.begin(), keywords.end(), [&](const keyword& kw) { return kw.what == p.what; });
    out += k->word;
    if (k->named) {
        out += ':';
        out += p.name;
    }
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    return base::ascii_lower(c) - 'a' + 10;
}

// An ip part's value from the admin path: the identifier text the limiter hashes.
std::string ip_value(std::string_view text, unsigned ipv6_prefix, std::string& error) {
    std::string_view addr_text = text;
    std::optional<unsigned> prefix;
    if (const auto slash = text.find('/'); slash != std::string_view::npos) {
        addr_text = text.substr(0, slash);
        const std::string_view digits = text.substr(slash + 1);
        unsigned n = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
        if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size()) {
            error = "ip value \"" + std::string(text) + "\": bad prefix length";
            return {};
        }
        prefix = n;
    }
    boost::system::error_code ec;
    const address a = boost::asio::ip::make_address(std::string(addr_text), ec);
    if (ec) {
        error = "ip value \"" + std::string(text) + "\" is not an IP address";
        return {};
    }
    const address n = normalize(a);
    if (prefix && (n.is_v4() || *prefix != std::clamp(ipv6_prefix, 1u, 128u))) {
        error = "ip value \"" + std::string(text) + "\": " +
                (n.is_v4() ? std::string("an IPv4 address takes no prefix")
                           : "clients.ipv6_prefix is " + std::to_string(ipv6_prefix));
        return {};
    }
    return ip_identifier(n, ipv6_prefix);
}

bool good_user(std::string_view v) {
    for (std::string_view p : {"key:", "user:", "jwt:", "cert:"})
        if (v.starts_with(p) && v.size() > p.size()) return true;
    return false;
}

}  // namespace

void kind_spec::hash_input(std::span<const std::string_view> values, std::string& out) const {
    out.clear();
    if (values.size() == 1) {
        out.append(values.front());
        return;
    }
    for (std::string_view v : values) {
        char digits[24];
        const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v.size());
        (void)ec;
        out.append(digits, end);
        out += ':';
        out.append(v);
    }
}

kind_spec_result parse_kind_spec(std::string_view text) {
    kind_spec_result r;
    if (text.empty()) {
        r.error = std::string(expected);
        return r;
    }
    std::size_t start = 0;
    while (true) {
        const auto plus = text.find('+', start);
        const std::string_view part = text.substr(start, plus == std::string_view::npos ? plus : plus - start);
        if (part.empty()) {
            r.error = "an empty part: " + std::string(expected);
            return r;
        }
        if (r.spec.parts.size() == max_parts) {
            r.error = "more than " + std::to_string(max_parts) + " parts";
            return r;
        }
        kind_part p;
        r.error = parse_part(part, p);
        if (!r.ok()) return r;
        if (std::find(r.spec.parts.begin(), r.spec.parts.end(), p) != r.spec.parts.end()) {
            std::string repeated;
            append_part_text(repeated, p);
            r.error = "\"" + repeated + "\" appears twice";
            return r;
        }
        r.spec.parts.push_back(std::move(p));
        if (plus == std::string_view::npos) break;
        start = plus + 1;
    }
    for (const auto& p : r.spec.parts) {
        if (!r.spec.text.empty()) r.spec.text += '+';
        append_part_text(r.spec.text, p);
    }
    return r;
}

bool percent_decode(std::string_view s, std::string& out) {
    out.clear();
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%') {
            out += s[i];
            continue;
        }
        if (i + 2 >= s.size() || !is_hex(s[i + 1]) || !is_hex(s[i + 2])) return false;
        out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
        i += 2;
    }
    return true;
}

path_identifier identifier_from_path(const kind_spec& spec, std::string_view raw, unsigned ipv6_prefix) {
    path_identifier r;
    std::vector<std::string_view> raw_parts;
    if (spec.composite()) {
        std::size_t start = 0;
        while (true) {
            const auto plus = raw.find('+', start);
            raw_parts.push_back(raw.substr(start, plus == std::string_view::npos ? plus : plus - start));
            if (plus == std::string_view::npos) break;
            start = plus + 1;
        }
        if (raw_parts.size() != spec.parts.size()) {
            r.error = "a " + spec.text + " identifier is " + std::to_string(spec.parts.size()) +
                      " values joined by '+' (a '+' within a value is written %2B), not " +
                      std::to_string(raw_parts.size());
            return r;
        }
    } else {
        raw_parts.push_back(raw);
    }
    std::vector<std::string> values(raw_parts.size());
    for (std::size_t i = 0; i < raw_parts.size(); ++i) {
        std::string part_text;
        append_part_text(part_text, spec.parts[i]);
        std::string decoded;
        if (!percent_decode(raw_parts[i], decoded)) {
            r.error = part_text + " value: bad percent-encoding";
            return r;
        }
        if (decoded.empty()) {
            r.error = part_text + " value is empty";
            return r;
        }
        switch (spec.parts[i].what) {
            case part_kind::ip: values[i] = ip_value(decoded, ipv6_prefix, r.error); break;
            case part_kind::user:
                if (!good_user(decoded))
                    r.error = "user value \"" + decoded + "\" is not \"key:<api key>\", \"user:<name>\", " +
                              "\"jwt:<subject>\" or \"cert:<name>\"";
                values[i] = std::move(decoded);
                break;
            case part_kind::route:
            case part_kind::header:
            case part_kind::claim:
            case part_kind::query: values[i] = std::move(decoded); break;
        }
        if (!r.ok()) return r;
    }
    std::vector<std::string_view> views(values.begin(), values.end());
    spec.hash_input(views, r.hash_input);
    return r;
}

}  // namespace sluice::identity
