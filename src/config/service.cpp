// service: Sluice as a rate-limit service for other proxies. grpc_listen (Envoy's RLS v3) and
// the domains whose descriptors it limits; each key has its own reader, so that the keys of
// other protocols join the same table.
#include "config/readers.hpp"

namespace sluice::config::detail {

namespace {

bool is_descriptor_key(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
               c == '.';
    });
}

// A value as the kind's text holds it: the characters that separate a path's entries ('/',
// '='), '%', braces (a Redis Cluster hash tag), blanks, controls and bytes beyond ASCII
// percent-encoded, so that one text is one path.
void append_value_text(std::string& out, std::string_view v) {
    constexpr std::string_view hex = "0123456789ABCDEF";
    for (const char c : v) {
        const auto u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u >= 0x7f || c == '%' || c == '/' || c == '=' || c == '{' || c == '}') {
            out += '%';
            out += hex[u >> 4];
            out += hex[u & 0x0f];
        } else {
            out += c;
        }
    }
}

std::optional<address> read_listen_or_off(const node_ref& v) {
    if (v.node().IsScalar() && v.node().Scalar() == "off") return std::nullopt;
    return read_address(v);
}

// `parent`: the kind text of the entry before ("descriptor:path=%2Flogin"), "" at the top.
void read_descriptors(const node_ref& n, const std::string& parent, std::vector<descriptor_config>& out) {
    schema::read_sequence(n, [&](const node_ref& item) {
        descriptor_config d;
        d.at = item.where();
        std::optional<node_ref> tiers_at, nested_at;
        read_mapping(item, {
                               {"key",
                                [&](const node_ref& v) {
                                    d.key =
                                        read_checked(v, is_descriptor_key,
                                                     "expected a descriptor key of letters, digits, '_', '-' or '.'");
                                },
                                presence::required},
                               {"value", [&](const node_ref& v) { d.value = read_string(v); }},
                               {"tiers",
                                [&](const node_ref& v) {
                                    // Its kind, the path, is known once the key is read.
                                    d.tiers = read_tier_list(v, "descriptor");
                                    tiers_at = v;
                                }},
                               {"descriptors", [&](const node_ref& v) { nested_at = v; }},
                           });
        std::string kind = parent.empty() ? "descriptor:" : parent + "/";
        kind += d.key;
        if (d.value) {
            kind += '=';
            append_value_text(kind, *d.value);
        }
        for (auto& t : d.tiers) t.kind = kind;
        for (std::size_t i = 0; i < d.tiers.size(); ++i) {
            if (d.tiers[i].algo == algorithm::concurrency)
                tiers_at->item(tiers_at->node()[i], i)
                    .fail("a descriptor holds no request in flight: concurrency tiers are for policies");
        }
        // Nested entries take the same keys: described once.
        if (nested_at && !item.describing()) read_descriptors(*nested_at, kind, d.descriptors);
        if (item.describing()) return;
        if (d.tiers.empty() && d.descriptors.empty())
            item.fail("expected tiers, or descriptors that follow this entry (a non-empty list)");
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (out[i].key == d.key && out[i].value == d.value)
                item.fail("the same key and value as descriptors[" + std::to_string(i) + "]: one would never match");
        }
        out.push_back(std::move(d));
    });
}

void read_domains(const node_ref& n, std::vector<service_domain_config>& out) {
    schema::read_entries(
        n,
        [&](const std::string& name, const node_ref& v) {
            service_domain_config d;
            d.name = name;
            read_mapping(v, {{"descriptors", [&](const node_ref& list) { read_descriptors(list, "", d.descriptors); },
                              presence::required}});
            if (!v.describing() && d.descriptors.empty()) v.fail("expected descriptors: a non-empty list");
            out.push_back(std::move(d));
        },
        "domain");
}

}  // namespace

void read_service(const node_ref& n, service_config& out) {
    read_mapping(n, {
                        {"grpc_listen", [&](const node_ref& v) { out.grpc_listen = read_listen_or_off(v); },
                         presence::optional, restart_only<&config::service, &service_config::grpc_listen>},
                        {"domains", [&](const node_ref& v) { read_domains(v, out.domains); }},
                    });
}

}  // namespace sluice::config::detail
