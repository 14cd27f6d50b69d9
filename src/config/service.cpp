// service: Sluice as a rate-limit service for other proxies: grpc_listen (Envoy's RLS v3) and
// the domains whose descriptors it limits; http_listen (the HTTP check of nginx's auth_request
// and Traefik's forwardAuth) and the peers it believes. Each key has a reader of its own.
#include "config/readers.hpp"
#include "config/stable_file.hpp"

#include <filesystem>

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

// An entry's key and value, as both file formats write them.
schema::field key_field(descriptor_config& d) {
    return {"key",
            [&d](const node_ref& v) {
                d.key =
                    read_checked(v, is_descriptor_key, "expected a descriptor key of letters, digits, '_', '-' or '.'");
            },
            presence::required};
}
schema::field value_field(descriptor_config& d) {
    return {"value", [&d](const node_ref& v) { d.value = read_string(v); }};
}

// The kind of an entry after `parent` ("" at the top): "descriptor:<key>[=<value>]/...".
std::string kind_text(const std::string& parent, const descriptor_config& d) {
    std::string kind = parent.empty() ? "descriptor:" : parent + "/";
    kind += d.key;
    if (d.value) {
        kind += '=';
        append_value_text(kind, *d.value);
    }
    return kind;
}

void check_unique(const node_ref& item, const std::vector<descriptor_config>& out, const descriptor_config& d) {
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (out[i].key == d.key && out[i].value == d.value)
            item.fail("the same key and value as descriptors[" + std::to_string(i) + "]: one would never match");
    }
}

// `parent`: the kind text of the entry before ("descriptor:path=%2Flogin"), "" at the top.
void read_descriptors(const node_ref& n, const std::string& parent, std::vector<descriptor_config>& out) {
    schema::read_sequence(n, [&](const node_ref& item) {
        descriptor_config d;
        d.at = item.where();
        std::optional<node_ref> tiers_at, nested_at, shadow_at;
        read_mapping(item, {
                               key_field(d),
                               value_field(d),
                               {"tiers",
                                [&](const node_ref& v) {
                                    if (v.node().IsScalar() && v.node().Scalar() == "plan") {
                                        d.by_plan = true;
                                        d.by_plan_at = v.where();
                                        return;
                                    }
                                    // Its kind, the path, is known once the key is read.
                                    d.tiers = read_tier_list(v, "descriptor");
                                    tiers_at = v;
                                }},
                               {"policy",
                                [&](const node_ref& v) {
                                    d.policy = read_string(v);
                                    d.policy_at = v.where();
                                }},
                               {"descriptors", [&](const node_ref& v) { nested_at = v; }},
                               {"shadow_mode",
                                [&](const node_ref& v) {
                                    d.shadow = schema::read_bool(v);
                                    shadow_at = v;
                                }},
                           });
        const std::string kind = kind_text(parent, d);
        d.kind = kind;
        for (auto& t : d.tiers) t.kind = kind;
        for (std::size_t i = 0; i < d.tiers.size(); ++i) {
            if (d.tiers[i].algo == algorithm::concurrency)
                tiers_at->item(tiers_at->node()[i], i)
                    .fail("a descriptor holds no request in flight: concurrency tiers are for policies");
        }
        // Nested entries take the same keys: described once.
        if (nested_at && !item.describing()) read_descriptors(*nested_at, kind, d.descriptors);
        if (item.describing()) return;
        if (d.tiers.empty() && !d.by_plan && d.descriptors.empty())
            item.fail("expected tiers, or descriptors that follow this entry (a non-empty list)");
        if (!d.policy.empty() && !d.by_plan)
            item.fail("policy: names the policy whose plan tiers `tiers: plan` shares; this entry has no tiers: plan");
        // Not inherited by the entries that follow: each names its own.
        if (d.shadow && d.tiers.empty() && !d.by_plan)
            shadow_at->fail("shadow_mode: true needs tiers on this entry (it applies to its own tiers only)");
        check_unique(item, out, d);
        out.push_back(std::move(d));
    });
}

void read_domains(const node_ref& n, std::vector<service_domain_config>& out) {
    schema::read_entries(
        n,
        [&](const std::string& name, const node_ref& v) {
            for (const auto& other : out)
                if (other.name == name) v.fail_at_key("domain " + name + " is defined twice");
            service_domain_config d;
            d.name = name;
            read_mapping(v, {{"descriptors", [&](const node_ref& list) { read_descriptors(list, "", d.descriptors); },
                              presence::required}});
            if (!v.describing() && d.descriptors.empty()) v.fail("expected descriptors: a non-empty list");
            out.push_back(std::move(d));
        },
        "domain");
}

// envoyproxy/ratelimit's unit: a fixed window of that length, aligned to Unix time as that
// service counts (month: the calendar month).
tier_config unit_tier(const node_ref& v, std::int64_t limit, const std::string& kind) {
    tier_config t;
    t.kind = kind;
    t.limit = limit;
    t.algo = algorithm::fixed;
    const std::string unit = to_lower(v.scalar("expected a unit: second, minute, hour, day, week or month"));
    using std::chrono::hours;
    if (unit == "second")
        t.per = std::chrono::seconds(1);
    else if (unit == "minute")
        t.per = std::chrono::minutes(1);
    else if (unit == "hour")
        t.per = hours(1);
    else if (unit == "day")
        t.per = hours(24);
    else if (unit == "week")
        t.per = hours(24 * 7);
    else if (unit == "month") {
        t.per = hours(31 * 24);
        t.month = true;
    } else
        v.fail("expected a unit: second, minute, hour, day, week or month (year is not supported)");
    t.precision = t.per;
    return t;
}

// One descriptor of an envoyproxy/ratelimit config file, as service.domains would write it.
void read_ratelimit_descriptors(const node_ref& n, const std::string& parent, std::vector<descriptor_config>& out) {
    schema::read_sequence(n, [&](const node_ref& item) {
        descriptor_config d;
        d.at = item.where();
        std::optional<node_ref> rate_at, nested_at;
        read_mapping(item, {
                               key_field(d),
                               value_field(d),
                               {"rate_limit", [&](const node_ref& v) { rate_at = v; }},
                               {"descriptors", [&](const node_ref& v) { nested_at = v; }},
                               // On an entry without a rate_limit it is read and has no effect, as there.
                               {"shadow_mode", [&](const node_ref& v) { d.shadow = schema::read_bool(v); }},
                               {"detailed_metric", [&](const node_ref& v) { schema::read_bool(v); }},
                           });
        // There, a value ending in '*' is a prefix (each value still counted on its own).
        d.value_prefix = d.value && d.value->ends_with('*');
        const std::string kind = kind_text(parent, d);
        if (rate_at) {
            std::int64_t limit = 0;
            std::optional<node_ref> unit_at;
            bool unlimited = false;
            read_mapping(*rate_at, {
                                       {"unit", [&](const node_ref& v) { unit_at = v; }, presence::required},
                                       {"requests_per_unit", [&](const node_ref& v) { limit = read_count(v); },
                                        presence::required},
                                       {"unlimited", [&](const node_ref& v) { unlimited = schema::read_bool(v); }},
                                       {"name", [&](const node_ref& v) { read_string(v); }},
                                   });
            if (!unlimited) d.tiers.push_back(unit_tier(*unit_at, limit, kind));
        }
        if (nested_at) read_ratelimit_descriptors(*nested_at, kind, d.descriptors);
        check_unique(item, out, d);
        out.push_back(std::move(d));
    });
}

// service.ratelimit_config_files: envoyproxy/ratelimit's files ({domain, descriptors}), each
// one more domain. A path is relative to the config file's directory; the file's errors name it.
void read_ratelimit_files(const node_ref& n, std::vector<service_domain_config>& out) {
    schema::read_sequence(n, [&](const node_ref& item) {
        if (item.describing()) return;
        std::filesystem::path path(read_string(item));
        if (path.is_relative()) path = std::filesystem::path(item.source()).parent_path() / path;
        const std::string name = path.string();  // the file's node_refs point to it
        std::string text;
        try {
            text = read_stable_file(name);
        } catch (const std::exception& e) {
            item.fail(e.what());
        }
        const YAML::Node doc = parse_document(text, name);
        const node_ref root(doc, name);
        service_domain_config d;
        std::optional<node_ref> domain_at;
        read_mapping(root,
                     {
                         {"domain",
                          [&](const node_ref& v) {
                              d.name = read_string(v);
                              domain_at = v;
                          },
                          presence::required},
                         {"descriptors", [&](const node_ref& v) { read_ratelimit_descriptors(v, "", d.descriptors); }},
                     });
        for (const auto& other : out)
            if (other.name == d.name) domain_at->fail("domain " + d.name + " is defined twice");
        out.push_back(std::move(d));
    });
}

// Nobody could ask the check with an empty list.
void read_http_peers(const node_ref& v, service_config& out) {
    out.http_peers.clear();
    read_list(v, empty_list::refused, [&](const node_ref& item) { out.http_peers.push_back(read_cidr(item)); });
}

}  // namespace

void read_service(const node_ref& n, service_config& out) {
    read_mapping(
        n,
        {
            {"grpc_listen", [&](const node_ref& v) { out.grpc_listen = read_listen_or_off(v); }, presence::optional,
             restart_only<&config::service, &service_config::grpc_listen>},
            {"max_concurrent_calls",
             [&](const node_ref& v) { out.max_concurrent_calls = schema::read_uint_as<std::size_t>(v, 1, 1'000'000); },
             presence::optional, restart_only<&config::service, &service_config::max_concurrent_calls>},
            {"http_listen", [&](const node_ref& v) { out.http_listen = read_listen_or_off(v); }, presence::optional,
             restart_only<&config::service, &service_config::http_listen>},
            {"http_peers", [&](const node_ref& v) { read_http_peers(v, out); }},
            {"domains", [&](const node_ref& v) { read_domains(v, out.domains); }},
            {"ratelimit_config_files", [&](const node_ref& v) { read_ratelimit_files(v, out.domains); }},
        });
}

}  // namespace sluice::config::detail
