#include "e2e.hpp"

#include <jwt.h>

#include <cstdlib>
#include <ctime>

namespace sluice::test {

std::string hs256_token(const std::string& secret, const std::string& sub, long exp_offset,
                        const std::vector<std::pair<std::string, std::string>>& claims) {
    jwt_t* jwt = nullptr;
    REQUIRE(jwt_new(&jwt) == 0);
    jwt_add_grant(jwt, "sub", sub.c_str());
    for (const auto& [name, value] : claims) jwt_add_grant(jwt, name.c_str(), value.c_str());
    jwt_add_grant_int(jwt, "exp", static_cast<long>(std::time(nullptr)) + exp_offset);
    jwt_set_alg(jwt, JWT_ALG_HS256, reinterpret_cast<const unsigned char*>(secret.data()),
                static_cast<int>(secret.size()));
    char* text = jwt_encode_str(jwt);
    std::string token = text;
    std::free(text);  // libjwt 1.10 has no jwt_free_str
    jwt_free(jwt);
    return token;
}

}  // namespace sluice::test
