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

std::size_t kind_names::index_of(const kind_part& p) const {
    const std::vector<std::string>* list = nullptr;
    switch (p.what) {
        case part_kind::header: list = &headers; break;
        case part_kind::claim: list = &claims; break;
        case part_kind::query: list = &queries; break;
        case part_kind::ip:
        case part_kind::user:
        case part_kind::route: return 0;
    }
    return static_cast<std::size_t>(std::lower_bound(list->begin(), list->end(), p.name) - list->begin());
}

kind_names names_used(const std::vector<config::policy_config>& policies) {
    kind_names n;
    for (const auto& p : policies) {
        for (const auto& k : p.kinds) {
            for (const auto& part : k.spec.parts) {
                if (part.what == part_kind::header) n.headers.push_back(part.name);
                if (part.what == part_kind::claim) n.claims.push_back(part.name);
                if (part.what == part_kind::query) n.queries.push_back(part.name);
            }
        }
    }
    for (auto* list : {&n.headers, &n.claims, &n.queries}) {
        std::sort(list->begin(), list->end());
        list->erase(std::unique(list->begin(), list->end()), list->end());
    }
    return n;
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
        config::append_part_text(part_text, spec.parts[i]);
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
