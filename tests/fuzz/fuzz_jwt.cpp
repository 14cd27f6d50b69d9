// jwt_verifier (identity/jwt.hpp), HS256 with a fixed secret. The first byte picks a mode:
// 0: the rest is the Authorization value; 1: the rest is "<header JSON>\n<payload JSON>",
// correctly signed; 2: the rest is a payload JSON under a fixed HS256 header, signed.
#include "check.hpp"
#include "identity/jwt.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <boost/json.hpp>

using namespace sluice;
using fuzz::check;

namespace {

constexpr std::string_view secret = "fuzz-secret-0123456789";
constexpr std::int64_t now = 1'700'000'000;
using status = enum identity::jwt_verifier::result::status;  // the member of that name hides the type

identity::jwt_verifier make(const char* alg) {
    config::jwt_config cfg;
    cfg.algorithms = {alg};
    cfg.secret_env = "FUZZ_JWT_SECRET";
    return identity::jwt_verifier(cfg, [](const char*) { return secret.data(); });
}

std::string b64url(std::string_view s) {  // unpadded: every 6 bits, the last group zero-filled
    static constexpr char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    for (std::size_t bit = 0; bit < s.size() * 8; bit += 6) {
        const unsigned hi = static_cast<unsigned char>(s[bit / 8]);
        const unsigned lo = bit / 8 + 1 < s.size() ? static_cast<unsigned char>(s[bit / 8 + 1]) : 0u;
        out += digits[((hi << 8 | lo) >> (10 - bit % 8)) & 63];
    }
    return out;
}

std::string sign(std::string_view head, std::string_view payload) {
    const std::string signing_input = b64url(head) + "." + b64url(payload);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
         reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(), mac, &len);
    return signing_input + "." + b64url({reinterpret_cast<const char*>(mac), len});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const auto hs256 = make("HS256");
    static const auto hs384 = make("HS384");
    if (size == 0) return 0;
    const int mode = data[0] % 3;
    std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (mode == 0) {
        const auto r = hs256.verify(rest, now);
        check(r.status == status::invalid ? !r.reason.empty() : !r.subject.empty(), "result without reason/subject");
        return 0;
    }
    const auto nl = mode == 1 ? rest.find('\n') : std::string_view::npos;
    const auto head = mode == 1 ? rest.substr(0, nl) : R"({"alg":"HS256","typ":"JWT"})";
    const auto payload = mode == 1 ? (nl == rest.npos ? std::string_view{} : rest.substr(nl + 1)) : rest;
    std::string token = sign(head, payload);
    const auto r = hs256.verify("Bearer " + token, now);
    check(hs384.verify("Bearer " + token, now).status == status::invalid, "HS256 token accepted by an HS384 verifier");
    if (r.status == status::ok) {
        const auto claims = boost::json::parse(payload).as_object();  // throws (crash) if it was not an object
        const auto& sub = claims.at("sub");
        check(sub.is_string() ? r.subject == std::string_view(sub.get_string())
                              : r.subject == boost::json::serialize(sub),
              "subject differs from the sub claim");
        char& c = token[token.rfind('.') + 1];
        c = c == 'A' ? 'B' : 'A';  // another signature, still base64url
        check(hs256.verify("Bearer " + token, now).status == status::invalid, "tampered signature accepted");
    } else {
        check(!r.reason.empty() && r.reason.find(token.substr(token.rfind('.'))) == std::string::npos, "bad reason");
    }
    return 0;
}
