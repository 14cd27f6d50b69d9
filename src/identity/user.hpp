// The user identity of a request from the configured sources (API key, JWT).
#pragma once

#include "config/config.hpp"
#include "identity/jwt.hpp"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::identity {

// What resolve() found. ok: `id` is "user:<registry name>", "key:<api key>" or
// "jwt:<claim>" or "cert:<name>" (hash it before use), `plan` the registry entry's or the JWT plan claim's
// plan ("" = none);
// invalid: the credentials were refused (a JWT that failed; with a registry that
// requires known keys, a key missing or unknown), `reason` is safe to show (the caller
// answers 401); none: no user source present.
struct user_result {
    enum class status { none, ok, invalid };
    status status = status::none;
    std::string id;
    std::string reason;
    std::string plan;
    // ok from a JWT, or from an API key beside a JWT that verifies: the values of the claims
    // resolve() was asked for, in order (jwt_verifier); else empty.
    std::vector<std::optional<std::string>> claims;
};

// Resolves the user from header values that the caller looked up.
//
// Contract: the API key header wins when configured and its value is non-empty. Without a
// registry (clients.user.api_keys) the key is taken as is and counted per key; with one,
// a key is looked up by its SHA-256: a known key is its entry's user, an unknown one is
// refused with require_known and else counted per key. Otherwise the JWT header when
// configured and present; otherwise none, or refused when the registry requires known
// keys. The constructor builds the jwt_verifier and throws std::runtime_error as it does.
// Thread: construct anywhere; resolve() is const and may be called from any number of
// threads at once.
class user_resolver {
public:
    explicit user_resolver(const config::clients_config& c,
                           const std::function<const char*(const char*)>& getenv = ::getenv);

    // `certificate`: the name a verified client certificate gives ("" = none), taken after
    // an API key and a JWT: "cert:<name>". `claims`: the JWT claims to read besides the user's
    // (claim:<name> kinds), from a JWT that verifies, whether it or an API key names the user.
    user_result resolve(std::string_view api_key_value,  // "" if absent
                        std::optional<std::string_view> jwt_header_value, std::int64_t now_unix_seconds,
                        std::string_view certificate = {}, std::span<const std::string> claims = {}) const;

    // An API key alone, looked up as resolve() looks up the key header's value (Envoy's
    // descriptors with `tiers: plan`): ok with "user:<name>" and the entry's plan, or
    // "key:<key>" when the registry does not require known keys; invalid for an unknown key
    // with require_known; an empty key is none, or invalid with require_known.
    user_result resolve_key(std::string_view key) const;

    const std::string& api_key_header() const { return api_key_header_; }  // "" = not configured
    const std::string* jwt_header() const { return jwt_ ? &jwt_header_ : nullptr; }

private:
    struct sha256_hash {
        std::size_t operator()(const std::array<std::uint8_t, 32>& d) const;
    };
    struct sha256_equal {  // in constant time (CRYPTO_memcmp)
        bool operator()(const std::array<std::uint8_t, 32>& a, const std::array<std::uint8_t, 32>& b) const;
    };
    std::string api_key_header_;
    bool require_known_ = false;
    bool certificates_ = false;  // clients.user.certificate is set
    // SHA-256 of a key -> its entry. Digests are compared in constant time, though how far
    // a presented key's digest matches a stored one tells nothing about the stored key.
    std::unordered_map<std::array<std::uint8_t, 32>, config::api_key_entry, sha256_hash, sha256_equal> registry_;
    std::string jwt_header_;
    std::optional<jwt_verifier> jwt_;
};

}  // namespace sluice::identity
