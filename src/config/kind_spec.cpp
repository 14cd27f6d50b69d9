#include "config/kind_spec.hpp"

#include "base/text.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace sluice::config {

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

}  // namespace

void append_part_text(std::string& out, const kind_part& p) {
    const auto k = std::find_if(keywords.begin(), keywords.end(), [&](const keyword& kw) { return kw.what == p.what; });
    out += k->word;
    if (k->named) {
        out += ':';
        out += p.name;
    }
}

void kind_spec::hash_input(std::span<const std::string_view> values, std::string& out) {
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

}  // namespace sluice::config
