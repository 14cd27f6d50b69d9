// JWT verification with libjwt 1.10, plus the checks libjwt does not make.
#pragma once

#include "config/config.hpp"

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::identity {

// Verifies "Authorization: Bearer <JWT>" values against one configured issuer.
//
// Contract: libjwt 1.10 trusts the token's own `alg` and checks no claims, so verify():
//  1. requires "Bearer <token>" (scheme case-insensitive, surrounding spaces trimmed);
//  2. base64url-decodes and parses the token's header and payload itself (Boost.JSON);
//     rejects a `crit` header, and any `alg` not in the configured list (so "none" is
//     always rejected);
//  3. chooses the key by the configured algorithm family, never by the token: HS* → the
//     secret from the environment, RS256/ES256 → the public key read at construction;
//  4. jwt_decode() with that key, then requires jwt_get_alg() to be the pinned alg;
//  5. `exp` and `nbf` are optional; when present they must be numbers and are enforced
//     against `now` with the configured leeway (expired when now >= exp + leeway; not
//     yet valid when now + leeway < nbf);
//  6. reads the configured claim: a non-empty string, or an integer as decimal text;
//     and the plan claim when configured: absent or null is no plan, else a non-empty
//     string; and each claim `claims` names (claim:<name> identifier kinds) the same way
//     as the user claim, nullopt where absent, empty or of another type.
// Failures are values: status invalid with a short reason that is safe to show a
// client and never echoes the token.
//
// The constructor throws std::runtime_error with a clear message if an HS* algorithm is
// listed and the secret variable is unset or empty, or if RS256/ES256 is listed and the
// key file cannot be read, is not a PEM public key, or is not of the listed type (RSA for
// RS256, EC P-256 for ES256; listing both is therefore an error). `getenv` is injectable
// for tests. Thread: construct anywhere; verify() is const, keeps no shared mutable state
// and may be called from any number of threads at once.
class jwt_verifier {
public:
    struct result {
        enum class status { ok, invalid };
        status status = status::invalid;
        std::string subject;                             // the claim's value when ok
        std::string plan;                                // the plan claim's value when ok ("" = none)
        std::string reason;                              // when invalid: "token expired", "signature invalid", ...
        std::vector<std::optional<std::string>> claims;  // when ok: the values of `claims`, in order
    };

    explicit jwt_verifier(const config::jwt_config& cfg,
                          const std::function<const char*(const char*)>& getenv = ::getenv);

    result verify(std::string_view header_value, std::int64_t now_unix_seconds,
                  std::span<const std::string> claims = {}) const;

private:
    std::vector<int> algorithms_;  // jwt_alg_t values, in configured order
    std::string secret_;           // for HS*
    std::string public_key_pem_;   // for RS256 / ES256
    std::string claim_;
    std::string plan_claim_;  // "" = none
    double leeway_seconds_ = 0;
};

}  // namespace sluice::identity
