// clients: who is calling. The client address behind trusted proxies, the users named by
// an API key (and the key registry file) or a JWT, and the networks that bypass limits.
#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "config/readers.hpp"
#include "config/stable_file.hpp"

namespace sluice::config::detail {

namespace {

constexpr duration max_jwt_leeway = std::chrono::minutes(10);

std::string read_jwt_algorithm(const node_ref& v) {
    if (v.node().IsScalar() && to_lower(v.node().Scalar()) == "none") v.fail(jwt_alg_none);
    return schema::read_choice(v, {"HS256", "HS384", "HS512", "RS256", "ES256"});
}

bool lists_any(const std::vector<std::string>& algorithms, std::initializer_list<std::string_view> wanted) {
    return std::any_of(algorithms.begin(), algorithms.end(), [&](const std::string& a) {
        return std::find(wanted.begin(), wanted.end(), a) != wanted.end();
    });
}

// The key material the listed algorithms need; reported like a missing key.
void check_jwt_keys(const node_ref& n, const jwt_config& jwt) {
    if (lists_any(jwt.algorithms, {"HS256", "HS384", "HS512"}) && jwt.secret_env.empty()) {
        n.fail_at(n.mark(), n.path_of("secret_env"), jwt_needs_secret);
    }
    if (lists_any(jwt.algorithms, {"RS256", "ES256"}) && jwt.public_key_file.empty()) {
        n.fail_at(n.mark(), n.path_of("public_key_file"), jwt_needs_public_key);
    }
}

duration read_leeway(const node_ref& v) {
    duration d = read_duration(v, zero::allowed);
    if (d > max_jwt_leeway) v.fail(leeway_too_large);
    return d;
}

jwt_config read_jwt(const node_ref& n) {
    jwt_config jwt;
    read_mapping(n,
                 {
                     {"header", [&](const node_ref& v) { jwt.header = read_checked(v, is_token, bad_header_name); }},
                     {"algorithms", [&](const node_ref& v) { jwt.algorithms = read_distinct(v, read_jwt_algorithm); },
                      presence::required},
                     {"secret_env", [&](const node_ref& v) { jwt.secret_env = read_env_name(v); }},
                     {"public_key_file", [&](const node_ref& v) { jwt.public_key_file = read_string(v); }},
                     {"claim", [&](const node_ref& v) { jwt.claim = read_string(v); }},
                     {"plan_claim", [&](const node_ref& v) { jwt.plan_claim = read_string(v); }},
                     {"leeway", [&](const node_ref& v) { jwt.leeway = read_leeway(v); }},
                 });
    check_jwt_keys(n, jwt);
    return jwt;
}

std::array<std::uint8_t, 32> read_sha256(const node_ref& v) {
    const std::string& s = v.scalar("64 hex digits (the SHA-256 of the key)");
    std::array<std::uint8_t, 32> out{};
    const auto digit = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    if (s.size() != 64)
        v.fail("expected 64 hex digits (the SHA-256 of the key), got " + std::to_string(s.size()) + " characters");
    for (std::size_t i = 0; i < 32; ++i) {
        const int hi = digit(s[2 * i]), lo = digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0) v.fail("expected 64 hex digits (the SHA-256 of the key)");
        out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return out;
}

// The registry file: a list of { sha256, user, plan }. Its errors name its own file.
std::vector<api_key_entry> read_key_file(const std::string& path) {
    const YAML::Node doc = parse_document(read_stable_file(path), path);
    const node_ref root(doc, path);
    std::vector<api_key_entry> keys;
    if (root.is_null()) return keys;
    std::map<std::array<std::uint8_t, 32>, std::size_t> seen;
    schema::read_sequence(root, [&](const node_ref& item) {
        api_key_entry e;
        read_mapping(item,
                     {
                         {"sha256", [&](const node_ref& v) { e.sha256 = read_sha256(v); }, presence::required},
                         {"user", [&](const node_ref& v) { e.user = read_checked(v, is_user_name, bad_user_name); },
                          presence::required},
                         {"plan",
                          [&](const node_ref& v) {
                              e.plan = read_checked(v, is_policy_name, bad_plan_name);
                              e.plan_at = v.where();
                          }},
                     });
        if (auto [it, fresh] = seen.emplace(e.sha256, keys.size()); !fresh) {
            item.fail("the same key as entry " + std::to_string(it->second));
        }
        keys.push_back(std::move(e));
    });
    return keys;
}

api_keys_config read_api_keys(const node_ref& n) {
    api_keys_config out;
    read_mapping(n, {
                        {"file", [&](const node_ref& v) { out.file = read_string(v); }, presence::required},
                        {"require_known", [&](const node_ref& v) { out.require_known = schema::read_bool(v); }},
                    });
    std::filesystem::path path(out.file);
    if (path.is_relative()) path = std::filesystem::path(n.source()).parent_path() / path;
    try {
        out.keys = read_key_file(path.string());
    } catch (const config_error& e) {
        // The file's own errors name it; one that cannot be read is named here, at `file`.
        if (std::string_view(e.what()).starts_with(path.string() + ": cannot read")) {
            n.fail_at(n.mark(), n.path_of("file"), e.what());
        }
        throw;
    }
    return out;
}

void read_user(const node_ref& n, clients_config& out) {
    read_mapping(n, {
                        {"api_key_header",
                         [&](const node_ref& v) { out.api_key_header = read_checked(v, is_token, bad_header_name); }},
                        {"jwt", [&](const node_ref& v) { out.jwt = read_jwt(v); }},
                        {"api_keys", [&](const node_ref& v) { out.api_keys = read_api_keys(v); }},
                        {"default_plan",
                         [&](const node_ref& v) {
                             out.default_plan = read_checked(v, is_policy_name, bad_plan_name);
                             out.default_plan_at = v.where();
                         }},
                        {"certificate",
                         [&](const node_ref& v) {
                             using name = clients_config::certificate_name;
                             const auto s = schema::read_choice(v, {"subject_cn", "san_dns", "san_uri", "san_email"});
                             out.user_certificate = s == "subject_cn" ? name::subject_cn
                                                    : s == "san_dns"  ? name::san_dns
                                                    : s == "san_uri"  ? name::san_uri
                                                                      : name::san_email;
                             out.user_certificate_at = v.where();
                         }},
                    });
    if (out.api_keys && out.api_key_header.empty()) n.fail_at(n.mark(), n.path_of("api_keys"), api_keys_need_header);
}

}  // namespace

void read_clients(const node_ref& n, clients_config& out) {
    using forwarded_kind = clients_config::forwarded_kind;
    read_mapping(n,
                 {
                     {"trusted_proxies", [&](const node_ref& v) { out.trusted_proxies = read_cidrs(v); }},
                     {"forwarded_header",
                      [&](const node_ref& v) {
                          out.forwarded_header = read_enum<forwarded_kind>(v, {"x-forwarded-for", "forwarded", "none"});
                      }},
                     {"ipv6_prefix", [&](const node_ref& v) { out.ipv6_prefix = schema::read_uint_as(v, 1u, 128u); }},
                     {"allow", [&](const node_ref& v) { out.allow = read_cidrs(v); }},
                     {"user", [&](const node_ref& v) { read_user(v, out); }},
                 });
}

}  // namespace sluice::config::detail
