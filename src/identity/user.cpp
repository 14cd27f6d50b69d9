#include "identity/user.hpp"

namespace sluice::identity {

user_resolver::user_resolver(const config::clients_config& c, const std::function<const char*(const char*)>& getenv)
    : api_key_header_(c.api_key_header) {
    if (c.jwt) {
        jwt_header_ = c.jwt->header;
        jwt_.emplace(*c.jwt, getenv);
    }
}

user_result user_resolver::resolve(std::string_view api_key_value, std::optional<std::string_view> jwt_header_value,
                                   std::int64_t now_unix_seconds) const {
    user_result r;
    if (!api_key_header_.empty() && !api_key_value.empty()) {
        r.status = user_result::status::ok;
        r.id.reserve(4 + api_key_value.size());
        r.id.append("key:").append(api_key_value);
        return r;
    }
    if (jwt_ && jwt_header_value) {
        auto v = jwt_->verify(*jwt_header_value, now_unix_seconds);
        if (v.status == jwt_verifier::result::status::ok) {
            r.status = user_result::status::ok;
            r.id = "jwt:" + v.subject;
        } else {
            r.status = user_result::status::invalid;
            r.reason = std::move(v.reason);
        }
    }
    return r;
}

}  // namespace sluice::identity
