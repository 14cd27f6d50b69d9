#include "identity/jwt.hpp"

#include "base/text.hpp"

#include "config/stable_file.hpp"

#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <boost/json.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>

namespace sluice::identity {

namespace {

using base::iequals;
using base::trim;

constexpr std::size_t max_token_bytes = 8192;

bool is_hs(jwt_alg_t a) { return a == JWT_ALG_HS256 || a == JWT_ALG_HS384 || a == JWT_ALG_HS512; }

// The algorithms Sluice supports; the name is matched exactly (case-sensitive, as JWA).
std::optional<jwt_alg_t> alg_from_name(std::string_view s) {
    if (s == "HS256") return JWT_ALG_HS256;
    if (s == "HS384") return JWT_ALG_HS384;
    if (s == "HS512") return JWT_ALG_HS512;
    if (s == "RS256") return JWT_ALG_RS256;
    if (s == "ES256") return JWT_ALG_ES256;
    return std::nullopt;
}

int b64url_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-') return 62;
    if (c == '_') return 63;
    return -1;
}

// Strict base64url without padding (RFC 7515 §2): other characters, an impossible
// length or non-zero trailing bits are errors.
std::optional<std::string> b64url_decode(std::string_view s) {
    if (s.size() % 4 == 1) return std::nullopt;
    std::string out;
    out.reserve(s.size() / 4 * 3 + 2);
    std::uint32_t acc = 0;
    int bits = 0;
    for (char c : s) {
        const int v = b64url_value(c);
        if (v < 0) return std::nullopt;
        acc = (acc << 6) | static_cast<std::uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xff));
        }
    }
    if ((acc & ((1u << bits) - 1)) != 0) return std::nullopt;
    return out;
}

bool all_b64url(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return b64url_value(c) >= 0; });
}

// Parses a decoded JSON segment into an object, or nullopt.
std::optional<boost::json::object> parse_object(std::string_view text) {
    boost::json::error_code ec;
    boost::json::value v = boost::json::parse(text, ec);
    if (ec || !v.is_object()) return std::nullopt;
    return std::move(v.as_object());
}

// A NumericDate: any JSON number. Anything else → nullopt.
std::optional<double> numeric_date(const boost::json::value& v) {
    if (v.is_int64()) return static_cast<double>(v.get_int64());
    if (v.is_uint64()) return static_cast<double>(v.get_uint64());
    if (v.is_double()) return v.get_double();
    return std::nullopt;
}

// A claim naming an identifier: a non-empty string as is, an integer as decimal text;
// anything else (empty, null, a boolean, a fraction, an array, an object) → nullopt.
std::optional<std::string> claim_text(const boost::json::value& v) {
    if (v.is_string() && !v.get_string().empty()) return std::string(v.get_string().data(), v.get_string().size());
    if (v.is_int64()) return std::to_string(v.get_int64());
    if (v.is_uint64()) return std::to_string(v.get_uint64());
    return std::nullopt;
}

struct jwt_deleter {
    void operator()(jwt_t* j) const { jwt_free(j); }
};
struct pkey_deleter {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct bio_deleter {
    void operator()(BIO* b) const { BIO_free(b); }
};

std::string read_file(const std::string& path) {
    try {
        return config::read_stable_file(path);
    } catch (const config::config_error& e) {
        throw std::runtime_error(std::string("jwt: public_key_file ") + e.what());
    }
}

// Checks that `pem` is a public key usable for every asymmetric algorithm listed.
void check_public_key(const std::string& pem, const std::string& path, bool want_rsa, bool want_ec) {
    if (want_rsa && want_ec)
        throw std::runtime_error("jwt: RS256 and ES256 cannot both be listed: public_key_file '" + path +
                                 "' holds one key");
    std::unique_ptr<BIO, bio_deleter> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    if (!bio) throw std::runtime_error("jwt: out of memory reading the public key");
    std::unique_ptr<EVP_PKEY, pkey_deleter> key(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
    if (!key)
        throw std::runtime_error("jwt: public_key_file '" + path +
                                 "' is not a PEM public key (\"-----BEGIN PUBLIC KEY-----\")");
    const int id = EVP_PKEY_get_base_id(key.get());
    if (want_rsa) {
        if (id != EVP_PKEY_RSA)
            throw std::runtime_error("jwt: RS256 is listed but public_key_file '" + path + "' is not an RSA key");
        if (EVP_PKEY_get_bits(key.get()) < 2048)
            throw std::runtime_error("jwt: the RSA key in '" + path + "' is shorter than 2048 bits");
    }
    if (want_ec) {
        char group[64] = {};
        std::size_t len = 0;
        if (id != EVP_PKEY_EC ||
            EVP_PKEY_get_utf8_string_param(key.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &len) != 1 ||
            std::string_view(group, len) != "prime256v1")
            throw std::runtime_error("jwt: ES256 is listed but public_key_file '" + path + "' is not an EC P-256 key");
    }
}

jwt_verifier::result invalid(std::string reason) {
    jwt_verifier::result r;
    r.status = jwt_verifier::result::status::invalid;
    r.reason = std::move(reason);
    return r;
}

}  // namespace

jwt_verifier::jwt_verifier(const config::jwt_config& cfg, const std::function<const char*(const char*)>& getenv)
    : claim_(cfg.claim),
      plan_claim_(cfg.plan_claim),
      leeway_seconds_(static_cast<double>(cfg.leeway.count()) / 1000.0) {
    if (cfg.algorithms.empty()) throw std::runtime_error("jwt: no algorithms configured");
    if (claim_.empty()) throw std::runtime_error("jwt: no claim configured");
    bool any_hs = false, want_rsa = false, want_ec = false;
    for (const auto& name : cfg.algorithms) {
        const auto a = alg_from_name(name);
        if (!a) throw std::runtime_error("jwt: unsupported algorithm '" + name + "'");
        if (std::find(algorithms_.begin(), algorithms_.end(), *a) == algorithms_.end()) algorithms_.push_back(*a);
        any_hs = any_hs || is_hs(*a);
        want_rsa = want_rsa || *a == JWT_ALG_RS256;
        want_ec = want_ec || *a == JWT_ALG_ES256;
    }
    if (any_hs) {
        if (cfg.secret_env.empty())
            throw std::runtime_error("jwt: an HS* algorithm is listed but secret_env is not set");
        const char* v = getenv(cfg.secret_env.c_str());
        if (v == nullptr || *v == '\0')
            throw std::runtime_error("jwt: environment variable " + cfg.secret_env +
                                     " (the JWT secret) is unset or empty");
        secret_ = v;
    }
    if (want_rsa || want_ec) {
        if (cfg.public_key_file.empty())
            throw std::runtime_error("jwt: RS256/ES256 is listed but public_key_file is not set");
        public_key_pem_ = read_file(cfg.public_key_file);
        check_public_key(public_key_pem_, cfg.public_key_file, want_rsa, want_ec);
    }
}

jwt_verifier::result jwt_verifier::verify(std::string_view header_value, std::int64_t now,
                                          std::span<const std::string> claims) const {
    // 1. "Bearer <token>"
    const std::string_view v = trim(header_value);
    const auto sp = v.find_first_of(" \t");
    if (sp == std::string_view::npos || !iequals(v.substr(0, sp), "bearer")) return invalid("bearer token required");
    const std::string_view token = trim(v.substr(sp + 1));
    if (token.empty()) return invalid("bearer token required");
    if (token.size() > max_token_bytes) return invalid("malformed token");

    // 2. Three segments; our own reading of header and payload.
    const auto d1 = token.find('.');
    const auto d2 = d1 == std::string_view::npos ? d1 : token.find('.', d1 + 1);
    if (d2 == std::string_view::npos || token.find('.', d2 + 1) != std::string_view::npos)
        return invalid("malformed token");
    const auto head_b64 = token.substr(0, d1);
    const auto body_b64 = token.substr(d1 + 1, d2 - d1 - 1);
    const auto sig_b64 = token.substr(d2 + 1);
    const auto head_json = b64url_decode(head_b64);
    const auto body_json = b64url_decode(body_b64);
    if (!head_json || !body_json || !all_b64url(sig_b64)) return invalid("malformed token");
    const auto head = parse_object(*head_json);
    const auto body = parse_object(*body_json);
    if (!head || !body) return invalid("malformed token");
    if (head->contains("crit")) return invalid("unsupported critical header");
    const auto* alg_v = head->if_contains("alg");
    if (alg_v == nullptr || !alg_v->is_string()) return invalid("malformed token");
    const auto alg = alg_from_name(std::string_view(alg_v->get_string()));
    if (!alg || std::find(algorithms_.begin(), algorithms_.end(), *alg) == algorithms_.end())
        return invalid("algorithm not allowed");
    if (sig_b64.empty()) return invalid("signature invalid");

    // 3. The key by the pinned algorithm's family, never by the token.
    const std::string& key = is_hs(*alg) ? secret_ : public_key_pem_;

    // 4. Signature.
    const std::string token_z(token);
    jwt_t* raw = nullptr;
    const int rc = jwt_decode(&raw, token_z.c_str(), reinterpret_cast<const unsigned char*>(key.data()),
                              static_cast<int>(key.size()));
    std::unique_ptr<jwt_t, jwt_deleter> decoded(raw);
    if (rc != 0 || !decoded) return invalid("signature invalid");
    if (jwt_get_alg(decoded.get()) != *alg) return invalid("algorithm not allowed");

    // 5. Time claims, from the payload whose bytes were just verified.
    const double t = static_cast<double>(now);
    if (const auto* exp = body->if_contains("exp")) {
        const auto e = numeric_date(*exp);
        if (!e) return invalid("malformed token");
        if (t >= *e + leeway_seconds_) return invalid("token expired");
    }
    if (const auto* nbf = body->if_contains("nbf")) {
        const auto n = numeric_date(*nbf);
        if (!n) return invalid("malformed token");
        if (t + leeway_seconds_ < *n) return invalid("not yet valid");
    }

    // 6. The user claim.
    const auto* c = body->if_contains(claim_);
    if (c == nullptr || c->is_null() || (c->is_string() && c->get_string().empty()))
        return invalid("missing claim " + claim_);
    result r;
    auto subject = claim_text(*c);
    if (!subject) return invalid("invalid claim " + claim_);
    r.subject = std::move(*subject);
    if (!plan_claim_.empty()) {
        if (const auto* p = body->if_contains(plan_claim_); p != nullptr && !p->is_null()) {
            if (!p->is_string() || p->get_string().empty()) return invalid("invalid claim " + plan_claim_);
            r.plan.assign(p->get_string().data(), p->get_string().size());
        }
    }
    r.claims.reserve(claims.size());
    for (const auto& name : claims) {
        const auto* v = body->if_contains(name);
        r.claims.push_back(v == nullptr ? std::nullopt : claim_text(*v));
    }
    r.status = result::status::ok;
    return r;
}

}  // namespace sluice::identity
