// The user identity of a request from the configured sources (API key, JWT).
#pragma once

#include "config/config.hpp"
#include "identity/jwt.hpp"

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::identity {

// What resolve() found. ok: `id` is "key:<api key>" or "jwt:<claim>" (hash it before use);
// invalid: a JWT was presented and failed, `reason` is safe to show (the caller answers
// 401); none: no user source present.
struct user_result {
    enum class status { none, ok, invalid };
    status status = status::none;
    std::string id;
    std::string reason;
};

// Resolves the user from header values that the caller looked up.
//
// Contract: the API key header wins when configured and its value is non-empty (the key
// is taken as is: Sluice does not check keys against a list, it only counts per key);
// otherwise the JWT header when configured and present; otherwise none. The constructor
// builds the jwt_verifier and throws std::runtime_error as it does. Thread: construct
// anywhere; resolve() is const and may be called from any number of threads at once.
class user_resolver {
public:
    explicit user_resolver(const config::clients_config& c,
                           const std::function<const char*(const char*)>& getenv = ::getenv);

    user_result resolve(std::string_view api_key_value,  // "" if absent
                        std::optional<std::string_view> jwt_header_value, std::int64_t now_unix_seconds) const;

    const std::string& api_key_header() const { return api_key_header_; }  // "" = not configured
    const std::string* jwt_header() const { return jwt_ ? &jwt_header_ : nullptr; }

private:
    std::string api_key_header_;
    std::string jwt_header_;
    std::optional<jwt_verifier> jwt_;
};

}  // namespace sluice::identity
