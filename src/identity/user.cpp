#include "identity/user.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstring>

namespace sluice::identity {

namespace {

constexpr const char* unknown_key = "unknown API key";
constexpr const char* missing_key = "an API key is required";
constexpr const char* missing_key_or_certificate = "an API key or a verified client certificate is required";

std::array<std::uint8_t, 32> sha256_of(std::string_view s) {
    std::array<std::uint8_t, 32> d{};
    unsigned int n = 0;
    EVP_Digest(s.data(), s.size(), d.data(), &n, EVP_sha256(), nullptr);
    return d;
}

}  // namespace

std::size_t user_resolver::sha256_hash::operator()(const std::array<std::uint8_t, 32>& d) const {
    std::size_t h;
    std::memcpy(&h, d.data(), sizeof h);
    return h;
}

bool user_resolver::sha256_equal::operator()(const std::array<std::uint8_t, 32>& a,
                                             const std::array<std::uint8_t, 32>& b) const {
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

user_resolver::user_resolver(const config::clients_config& c, const std::function<const char*(const char*)>& getenv)
    : api_key_header_(c.api_key_header),
      certificates_(c.user_certificate != config::clients_config::certificate_name::none) {
    if (c.jwt) {
        jwt_header_ = c.jwt->header;
        jwt_.emplace(*c.jwt, getenv);
    }
    if (c.api_keys) {
        require_known_ = c.api_keys->require_known;
        for (const auto& e : c.api_keys->keys) registry_.emplace(e.sha256, e);
    }
}

user_result user_resolver::resolve_key(std::string_view key) const {
    user_result r;
    if (key.empty()) {
        if (require_known_) {
            r.status = user_result::status::invalid;
            r.reason = missing_key;
        }
        return r;
    }
    if (!registry_.empty() || require_known_) {
        if (auto it = registry_.find(sha256_of(key)); it != registry_.end()) {
            r.status = user_result::status::ok;
            r.id.reserve(5 + it->second.user.size());
            r.id.append("user:").append(it->second.user);
            r.plan = it->second.plan;
            return r;
        }
        if (require_known_) {
            r.status = user_result::status::invalid;
            r.reason = unknown_key;
            return r;
        }
    }
    r.status = user_result::status::ok;
    r.id.reserve(4 + key.size());
    r.id.append("key:").append(key);
    return r;
}

user_result user_resolver::resolve(std::string_view api_key_value, std::optional<std::string_view> jwt_header_value,
                                   std::int64_t now_unix_seconds, std::string_view certificate,
                                   std::span<const std::string> claims) const {
    user_result r;
    // A token beside the key that named the user: its claims count when it verifies (else a
    // key beside a token, any key without a registry, would walk around a claim's limit).
    const auto token_claims = [&] {
        if (claims.empty() || !jwt_ || !jwt_header_value) return;
        auto v = jwt_->verify(*jwt_header_value, now_unix_seconds, claims);
        if (v.status == jwt_verifier::result::status::ok) r.claims = std::move(v.claims);
    };
    if (!api_key_header_.empty() && !api_key_value.empty()) {
        r = resolve_key(api_key_value);
        if (r.status == user_result::status::ok) token_claims();
        return r;
    }
    if (jwt_ && jwt_header_value) {
        auto v = jwt_->verify(*jwt_header_value, now_unix_seconds, claims);
        if (v.status == jwt_verifier::result::status::ok) {
            r.status = user_result::status::ok;
            r.id = "jwt:" + v.subject;
            r.plan = std::move(v.plan);
            r.claims = std::move(v.claims);
        } else {
            r.status = user_result::status::invalid;
            r.reason = std::move(v.reason);
        }
        return r;
    }
    if (!certificate.empty()) {
        r.status = user_result::status::ok;
        r.id.reserve(5 + certificate.size());
        r.id.append("cert:").append(certificate);
        return r;
    }
    if (require_known_) {
        r.status = user_result::status::invalid;
        r.reason = certificates_ ? missing_key_or_certificate : missing_key;
    }
    return r;
}

}  // namespace sluice::identity
