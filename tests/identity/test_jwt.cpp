// Tests of identity/jwt.hpp and identity/user.hpp, with tokens made by libjwt itself.
#include "identity/hasher.hpp"
#include "identity/jwt.hpp"
#include "identity/user.hpp"

#include <doctest/doctest.h>
#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

using namespace sluice::identity;
using status = enum jwt_verifier::result::status;  // the member of that name hides the type

namespace {

constexpr std::int64_t now = 1'700'000'000;
const std::string secret = "a-test-secret-of-at-least-32-bytes!!";

std::string b64url(std::string_view in) {
    static constexpr char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    std::uint32_t acc = 0;
    int bits = 0;
    for (unsigned char c : in) {
        acc = (acc << 8) | c;
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out.push_back(abc[(acc >> bits) & 63]);
        }
    }
    if (bits > 0) out.push_back(abc[(acc << (6 - bits)) & 63]);
    return out;
}

std::string pem_of(EVP_PKEY* k, bool priv) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
    REQUIRE(bio);
    if (priv)
        REQUIRE(PEM_write_bio_PrivateKey(bio.get(), k, nullptr, nullptr, 0, nullptr, nullptr) == 1);
    else
        REQUIRE(PEM_write_bio_PUBKEY(bio.get(), k) == 1);
    char* data = nullptr;
    const long len = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, static_cast<std::size_t>(len));
}

// Keys generated once per run, written to a private temporary directory.
struct keys {
    std::filesystem::path dir;
    std::string rsa_priv, rsa_pub, ec_priv, ec_pub;
    std::string rsa_pub_file, ec_pub_file, rsa_priv_file, garbage_file;

    keys() {
        char tmpl[] = "/tmp/sluice-jwt-test-XXXXXX";
        REQUIRE(mkdtemp(tmpl) != nullptr);
        dir = tmpl;
        EVP_PKEY* rsa = EVP_RSA_gen(2048);
        EVP_PKEY* ec = EVP_EC_gen("P-256");
        REQUIRE(rsa != nullptr);
        REQUIRE(ec != nullptr);
        rsa_priv = pem_of(rsa, true);
        rsa_pub = pem_of(rsa, false);
        ec_priv = pem_of(ec, true);
        ec_pub = pem_of(ec, false);
        EVP_PKEY_free(rsa);
        EVP_PKEY_free(ec);
        rsa_pub_file = write("rsa.pub.pem", rsa_pub);
        ec_pub_file = write("ec.pub.pem", ec_pub);
        rsa_priv_file = write("rsa.pem", rsa_priv);
        garbage_file = write("garbage.pem", "not a key\n");
    }
    ~keys() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string write(const char* name, const std::string& text) {
        const auto p = (dir / name).string();
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }
};

keys& test_keys() {
    static keys k;
    return k;
}

struct claims {
    std::map<std::string, std::string> str;
    std::map<std::string, long> num;
    std::string json;  // extra grants as JSON, e.g. R"({"exp":1.5e9})"
};

std::string make_token(jwt_alg_t alg, const std::string& key, const claims& c) {
    jwt_t* j = nullptr;
    REQUIRE(jwt_new(&j) == 0);
    std::unique_ptr<jwt_t, decltype(&jwt_free)> guard(j, &jwt_free);
    for (const auto& [k, v] : c.str) REQUIRE(jwt_add_grant(j, k.c_str(), v.c_str()) == 0);
    for (const auto& [k, v] : c.num) REQUIRE(jwt_add_grant_int(j, k.c_str(), v) == 0);
    if (!c.json.empty()) REQUIRE(jwt_add_grants_json(j, c.json.c_str()) == 0);
    REQUIRE(jwt_set_alg(j, alg, reinterpret_cast<const unsigned char*>(key.data()), static_cast<int>(key.size())) == 0);
    char* s = jwt_encode_str(j);
    REQUIRE(s != nullptr);
    std::string out(s);
    std::free(s);  // libjwt 1.10 has no jwt_free_str
    return out;
}

claims user(const std::string& sub = "alice") {
    claims c;
    c.str["sub"] = sub;
    c.num["exp"] = now + 3600;
    c.num["iat"] = now;
    return c;
}

std::function<const char*(const char*)> env_with(std::string value) {
    return [value = std::move(value)](const char* name) -> const char* {
        return std::string_view(name) == "JWT_SECRET" ? value.c_str() : nullptr;
    };
}

sluice::config::jwt_config cfg(std::vector<std::string> algs, std::string key_file = "") {
    sluice::config::jwt_config c;
    c.algorithms = std::move(algs);
    c.secret_env = "JWT_SECRET";
    c.public_key_file = std::move(key_file);
    return c;
}

jwt_verifier::result check(const jwt_verifier& v, const std::string& token, std::int64_t at = now) {
    return v.verify("Bearer " + token, at);
}

}  // namespace

TEST_CASE("identity: jwt accepts valid HS256, HS384 and HS512 tokens") {
    const jwt_verifier v(cfg({"HS256", "HS384", "HS512"}), env_with(secret));
    for (auto alg : {JWT_ALG_HS256, JWT_ALG_HS384, JWT_ALG_HS512}) {
        CAPTURE(jwt_alg_str(alg));
        const auto r = check(v, make_token(alg, secret, user()));
        CHECK(r.status == status::ok);
        CHECK(r.subject == "alice");
        CHECK(r.reason.empty());
    }
    // Timing, reported not asserted.
    const auto token = "Bearer " + make_token(JWT_ALG_HS256, secret, user());
    constexpr int n = 5000;
    int ok = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) ok += v.verify(token, now).status == status::ok;
    const auto t1 = std::chrono::steady_clock::now();
    CHECK(ok == n);
    MESSAGE("jwt: HS256 verify " << std::chrono::duration<double, std::micro>(t1 - t0).count() / n << " us");
}

TEST_CASE("identity: jwt accepts valid RS256 and ES256 tokens") {
    auto& k = test_keys();
    const jwt_verifier rs(cfg({"RS256"}, k.rsa_pub_file));
    const auto r = check(rs, make_token(JWT_ALG_RS256, k.rsa_priv, user("bob")));
    CHECK(r.status == status::ok);
    CHECK(r.subject == "bob");
    const jwt_verifier es(cfg({"ES256"}, k.ec_pub_file));
    const auto e = check(es, make_token(JWT_ALG_ES256, k.ec_priv, user("carol")));
    CHECK(e.status == status::ok);
    CHECK(e.subject == "carol");
    // The other family's token: its alg is not listed.
    CHECK(check(rs, make_token(JWT_ALG_ES256, k.ec_priv, user())).reason == "algorithm not allowed");
    // A token signed by another RSA key.
    EVP_PKEY* other = EVP_RSA_gen(2048);
    REQUIRE(other != nullptr);
    const auto other_priv = pem_of(other, true);
    EVP_PKEY_free(other);
    const auto bad = check(rs, make_token(JWT_ALG_RS256, other_priv, user()));
    CHECK(bad.status == status::invalid);
    CHECK(bad.reason == "signature invalid");
}

TEST_CASE("identity: jwt enforces exp and nbf with leeway") {
    const jwt_verifier v(cfg({"HS256"}), env_with(secret));  // leeway 30s
    claims c = user();
    c.num["exp"] = now - 31;
    auto r = check(v, make_token(JWT_ALG_HS256, secret, c));
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "token expired");
    CHECK(r.subject.empty());
    c.num["exp"] = now - 30;  // now >= exp + leeway: expired
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, c)).reason == "token expired");
    c.num["exp"] = now - 29;  // within leeway
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, c)).status == status::ok);

    claims f = user();
    f.num["nbf"] = now + 60;
    r = check(v, make_token(JWT_ALG_HS256, secret, f));
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "not yet valid");
    f.num["nbf"] = now + 30;  // within leeway
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, f)).status == status::ok);

    // exp and nbf are optional.
    claims none;
    none.str["sub"] = "dave";
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, none)).status == status::ok);

    // A fractional NumericDate is still enforced; a non-number is rejected.
    claims frac;
    frac.str["sub"] = "erin";
    frac.json = R"({"exp": 1699990000.5})";
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, frac)).reason == "token expired");
    frac.json = R"({"exp": 1800000000.5})";
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, frac)).status == status::ok);
    frac.json = R"({"exp": "1800000000"})";
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, frac)).reason == "malformed token");

    // Zero leeway.
    auto c0 = cfg({"HS256"});
    c0.leeway = std::chrono::seconds(0);
    const jwt_verifier strict(c0, env_with(secret));
    c.num["exp"] = now;
    CHECK(check(strict, make_token(JWT_ALG_HS256, secret, c)).reason == "token expired");
    c.num["exp"] = now + 1;
    CHECK(check(strict, make_token(JWT_ALG_HS256, secret, c)).status == status::ok);
}

TEST_CASE("identity: jwt rejects wrong secrets and tampering") {
    const jwt_verifier v(cfg({"HS256"}), env_with(secret));
    auto r = check(v, make_token(JWT_ALG_HS256, "some-other-secret-some-other-secret", user()));
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "signature invalid");

    const auto token = make_token(JWT_ALG_HS256, secret, user("alice"));
    const auto d1 = token.find('.'), d2 = token.rfind('.');
    const std::string forged_body = b64url(R"({"sub":"admin","exp":1700003600})");
    const auto tampered = token.substr(0, d1 + 1) + forged_body + token.substr(d2);
    r = check(v, tampered);
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "signature invalid");
    CHECK(r.reason.find("admin") == std::string::npos);

    // Signature stripped.
    CHECK(check(v, token.substr(0, d2 + 1)).reason == "signature invalid");
    // Signature of another token.
    const auto other = make_token(JWT_ALG_HS256, secret, user("mallory"));
    CHECK(check(v, token.substr(0, d2) + other.substr(other.rfind('.'))).reason == "signature invalid");
}

TEST_CASE("identity: jwt always rejects alg none") {
    const jwt_verifier v(cfg({"HS256"}), env_with(secret));
    const std::string head = b64url(R"({"alg":"none","typ":"JWT"})");
    CHECK(head == "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0");
    const std::string body = b64url(R"({"sub":"admin","exp":1700003600})");
    auto r = check(v, head + "." + body + ".");
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "algorithm not allowed");
    r = check(v, b64url(R"({"alg":"None"})") + "." + body + ".");
    CHECK(r.reason == "algorithm not allowed");
    // A header without alg.
    CHECK(check(v, b64url(R"({"typ":"JWT"})") + "." + body + ".x").reason == "malformed token");
}

TEST_CASE("identity: jwt resists algorithm confusion") {
    auto& k = test_keys();
    // An HS256 token whose HMAC key is the RSA public key PEM.
    const auto forged = make_token(JWT_ALG_HS256, k.rsa_pub, user("admin"));
    const jwt_verifier rs_only(cfg({"RS256"}, k.rsa_pub_file));
    auto r = check(rs_only, forged);
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "algorithm not allowed");
    const jwt_verifier both(cfg({"HS256", "RS256"}, k.rsa_pub_file), env_with(secret));
    r = check(both, forged);
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "signature invalid");
    // Both still accept their own tokens.
    CHECK(check(both, make_token(JWT_ALG_RS256, k.rsa_priv, user())).status == status::ok);
    CHECK(check(both, make_token(JWT_ALG_HS256, secret, user())).status == status::ok);
    // An RS256 header over an HMAC signature.
    const auto hs = make_token(JWT_ALG_HS256, secret, user("admin"));
    const auto rs_head = b64url(R"({"alg":"RS256","typ":"JWT"})");
    CHECK(check(both, rs_head + hs.substr(hs.find('.'))).status == status::invalid);
}

TEST_CASE("identity: jwt pins the algorithm libjwt used to the one we read") {
    // A duplicated "alg": whichever one each JSON parser keeps, an HS512 signature must
    // not pass a verifier that allows only HS256.
    const jwt_verifier v(cfg({"HS256"}), env_with(secret));
    auto sign = [](const EVP_MD* md, const std::string& input) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        HMAC(md, secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(input.data()),
             input.size(), mac, &len);
        return b64url(std::string_view(reinterpret_cast<const char*>(mac), len));
    };
    const auto body = b64url(R"({"sub":"admin"})");
    for (std::string head : {R"({"alg":"HS256","alg":"HS512"})", R"({"alg":"HS512","alg":"HS256"})"}) {
        CAPTURE(head);
        const std::string input = b64url(head) + "." + body;
        const auto r = check(v, input + "." + sign(EVP_sha512(), input));
        CHECK(r.status == status::invalid);
        CHECK(r.subject.empty());
    }
    // The same construction with a single alg and our own HMAC is accepted: the
    // signing above is right.
    const std::string plain = b64url(R"({"alg":"HS256"})") + "." + body;
    CHECK(check(v, plain + "." + sign(EVP_sha256(), plain)).status == status::ok);
}

TEST_CASE("identity: jwt rejects algorithms outside the list") {
    const jwt_verifier v(cfg({"HS256"}), env_with(secret));
    const auto r = check(v, make_token(JWT_ALG_HS512, secret, user()));
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "algorithm not allowed");
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, user())).status == status::ok);
    // Algorithms Sluice does not support at all are rejected by name.
    const auto body = b64url(R"({"sub":"a"})");
    CHECK(check(v, b64url(R"({"alg":"HS256 "})") + "." + body + ".x").reason == "algorithm not allowed");
    CHECK(check(v, b64url(R"({"alg":"PS256"})") + "." + body + ".x").reason == "algorithm not allowed");
    CHECK(check(v, b64url(R"({"alg":"HS256","crit":["exp"]})") + "." + body + ".x").reason ==
          "unsupported critical header");
}

TEST_CASE("identity: jwt reads the configured claim") {
    SUBCASE("missing") {
        const jwt_verifier v(cfg({"HS256"}), env_with(secret));
        claims c;
        c.num["exp"] = now + 60;
        const auto r = check(v, make_token(JWT_ALG_HS256, secret, c));
        CHECK(r.status == status::invalid);
        CHECK(r.reason == "missing claim sub");
        c.str["sub"] = "";
        CHECK(check(v, make_token(JWT_ALG_HS256, secret, c)).reason == "missing claim sub");
        c.str.clear();
        c.json = R"({"sub": true})";
        CHECK(check(v, make_token(JWT_ALG_HS256, secret, c)).reason == "invalid claim sub");
    }
    SUBCASE("custom string claim") {
        auto conf = cfg({"HS256"});
        conf.claim = "uid";
        const jwt_verifier v(conf, env_with(secret));
        claims c = user("not-this");
        c.str["uid"] = "u-123";
        const auto r = check(v, make_token(JWT_ALG_HS256, secret, c));
        CHECK(r.status == status::ok);
        CHECK(r.subject == "u-123");
        CHECK(check(v, make_token(JWT_ALG_HS256, secret, user())).reason == "missing claim uid");
    }
    SUBCASE("integer claim") {
        auto conf = cfg({"HS256"});
        conf.claim = "uid";
        const jwt_verifier v(conf, env_with(secret));
        claims c = user();
        c.num["uid"] = 4242;
        auto r = check(v, make_token(JWT_ALG_HS256, secret, c));
        CHECK(r.status == status::ok);
        CHECK(r.subject == "4242");
        c.num["uid"] = -7;
        CHECK(check(v, make_token(JWT_ALG_HS256, secret, c)).subject == "-7");
    }
}

TEST_CASE("identity: jwt reads the plan claim when configured: absent is no plan, not a string is invalid") {
    auto conf = cfg({"HS256"});
    conf.plan_claim = "plan";
    const jwt_verifier v(conf, env_with(secret));
    claims c = user();
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, c)).plan.empty());
    c.str["plan"] = "pro";
    auto r = check(v, make_token(JWT_ALG_HS256, secret, c));
    CHECK(r.status == status::ok);
    CHECK(r.subject == "alice");
    CHECK(r.plan == "pro");
    c.str.erase("plan");
    c.num["plan"] = 3;
    CHECK(check(v, make_token(JWT_ALG_HS256, secret, c)).reason == "invalid claim plan");
    // Without plan_claim the claim is not read.
    const jwt_verifier plain(cfg({"HS256"}), env_with(secret));
    CHECK(check(plain, make_token(JWT_ALG_HS256, secret, c)).status == status::ok);
}

TEST_CASE("identity: jwt header value format") {
    const jwt_verifier v(cfg({"HS256"}), env_with(secret));
    const auto token = make_token(JWT_ALG_HS256, secret, user());
    CHECK(v.verify("Bearer " + token, now).status == status::ok);
    CHECK(v.verify("  bEaReR   " + token + "  ", now).status == status::ok);
    CHECK(v.verify("bearer\t" + token, now).status == status::ok);
    auto r = v.verify(token, now);
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "bearer token required");
    CHECK(v.verify("Basic " + token, now).reason == "bearer token required");
    CHECK(v.verify("Bearer", now).reason == "bearer token required");
    CHECK(v.verify("Bearer ", now).reason == "bearer token required");
    CHECK(v.verify("", now).reason == "bearer token required");
    CHECK(v.verify("Bearertoken " + token, now).reason == "bearer token required");
    CHECK(v.verify("Bearer " + token + " extra", now).reason == "malformed token");
}

TEST_CASE("identity: jwt rejects malformed tokens") {
    const jwt_verifier v(cfg({"HS256"}), env_with(secret));
    const auto token = make_token(JWT_ALG_HS256, secret, user());
    const auto d1 = token.find('.');
    CHECK(check(v, "a.b").reason == "malformed token");
    CHECK(check(v, "a.b.c.d").reason == "malformed token");
    CHECK(check(v, "!!!." + token.substr(d1 + 1)).reason == "malformed token");                 // bad base64
    CHECK(check(v, token.substr(0, d1) + "=" + token.substr(d1)).reason == "malformed token");  // padding
    CHECK(check(v, token + "!").reason == "malformed token");
    CHECK(check(v, b64url("not json") + token.substr(d1)).reason == "malformed token");
    CHECK(check(v, b64url("[1,2]") + token.substr(d1)).reason == "malformed token");
    CHECK(check(v, token.substr(0, d1) + "." + b64url("{\"sub\":") + token.substr(token.rfind('.'))).reason ==
          "malformed token");
    CHECK(check(v, std::string(9000, 'a')).reason == "malformed token");
    const auto r = check(v, "..");
    CHECK(r.status == status::invalid);
    CHECK(r.reason == "malformed token");
}

TEST_CASE("identity: jwt constructor errors") {
    auto& k = test_keys();
    auto no_env = [](const char*) -> const char* { return nullptr; };
    CHECK_THROWS_WITH_AS(jwt_verifier(cfg({"HS256"}), no_env), doctest::Contains("JWT_SECRET"), std::runtime_error);
    CHECK_THROWS_AS(jwt_verifier(cfg({"HS256"}), env_with("")), std::runtime_error);
    CHECK_THROWS_WITH_AS(jwt_verifier(cfg({"RS256"}, (test_keys().dir / "missing.pem").string())),
                         doctest::Contains("cannot read"), std::runtime_error);
    CHECK_THROWS_AS(jwt_verifier(cfg({"RS256"}, "")), std::runtime_error);
    CHECK_THROWS_WITH_AS(jwt_verifier(cfg({"RS256"}, k.garbage_file)), doctest::Contains("not a PEM public key"),
                         std::runtime_error);
    CHECK_THROWS_AS(jwt_verifier(cfg({"RS256"}, k.rsa_priv_file)), std::runtime_error);
    CHECK_THROWS_WITH_AS(jwt_verifier(cfg({"RS256"}, k.ec_pub_file)), doctest::Contains("not an RSA key"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(jwt_verifier(cfg({"ES256"}, k.rsa_pub_file)), doctest::Contains("not an EC P-256 key"),
                         std::runtime_error);
    CHECK_THROWS_AS(jwt_verifier(cfg({"RS256", "ES256"}, k.rsa_pub_file)), std::runtime_error);
    CHECK_THROWS_AS(jwt_verifier(cfg({"HS1"}), env_with(secret)), std::runtime_error);
    CHECK_THROWS_AS(jwt_verifier(cfg({}), env_with(secret)), std::runtime_error);
    // A public key file is not needed for HS only; a secret is not needed for RS only.
    CHECK_NOTHROW(jwt_verifier(cfg({"HS256"}), env_with(secret)));
    CHECK_NOTHROW(jwt_verifier(cfg({"RS256"}, k.rsa_pub_file), no_env));
}

TEST_CASE("identity: user_resolver precedence") {
    sluice::config::clients_config c;
    c.api_key_header = "X-API-Key";
    c.jwt = cfg({"HS256"});
    const user_resolver u(c, env_with(secret));
    CHECK(u.api_key_header() == "X-API-Key");
    REQUIRE(u.jwt_header() != nullptr);
    CHECK(*u.jwt_header() == "Authorization");

    const std::string bearer = "Bearer " + make_token(JWT_ALG_HS256, secret, user("alice"));
    auto r = u.resolve("k-123", bearer, now);  // the API key wins
    CHECK(r.status == user_result::status::ok);
    CHECK(r.id == "key:k-123");
    r = u.resolve("", bearer, now);
    CHECK(r.status == user_result::status::ok);
    CHECK(r.id == "jwt:alice");
    r = u.resolve("", std::nullopt, now);
    CHECK(r.status == user_result::status::none);
    CHECK(r.id.empty());
    r = u.resolve("", std::string_view("Bearer garbage"), now);
    CHECK(r.status == user_result::status::invalid);
    CHECK(r.reason == "malformed token");
    CHECK(r.id.empty());
    r = u.resolve("k-9", std::string_view("Bearer garbage"), now);  // a key still wins
    CHECK(r.status == user_result::status::ok);
    CHECK(r.id == "key:k-9");

    sluice::config::clients_config bare;
    const user_resolver none(bare);
    CHECK(none.api_key_header().empty());
    CHECK(none.jwt_header() == nullptr);
    CHECK(none.resolve("k", bearer, now).status == user_result::status::none);

    sluice::config::clients_config key_only;
    key_only.api_key_header = "X-API-Key";
    const user_resolver ko(key_only);
    CHECK(ko.resolve("abc", std::nullopt, now).id == "key:abc");
    CHECK(ko.resolve("", bearer, now).status == user_result::status::none);

    c.jwt->secret_env = "JWT_SECRET";
    CHECK_THROWS_AS(user_resolver(c, [](const char*) -> const char* { return nullptr; }), std::runtime_error);
}

TEST_CASE("identity: jwt_verifier and hasher are usable from several threads at once") {
    auto& k = test_keys();
    const jwt_verifier v(cfg({"HS256", "RS256"}, k.rsa_pub_file), env_with(secret));
    const hasher h("thread-secret");
    const auto hs = "Bearer " + make_token(JWT_ALG_HS256, secret, user("t-hs"));
    const auto rs = "Bearer " + make_token(JWT_ALG_RS256, k.rsa_priv, user("t-rs"));
    const auto expected = h.hash("user", "jwt:t-hs");
    std::vector<int> failures(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 200; ++i) {
                const auto a = v.verify(hs, now);
                const auto b = v.verify(rs, now);
                if (a.subject != "t-hs" || b.subject != "t-rs") ++failures[t];
                if (h.hash("user", "jwt:" + a.subject) != expected) ++failures[t];
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) CHECK(failures[t] == 0);
}
