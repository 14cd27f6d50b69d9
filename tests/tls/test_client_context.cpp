// tls::client_context: what OpenSSL refuses in upstream.tls's files is a config error at
// the key that named the file (fixtures under tests/config/fixtures/upstream_tls/, whose
// "DIR" is that folder), and each SSL it makes names and verifies the upstream as asked.
#include "config/config.hpp"
#include "tls/client_context.hpp"

#include <doctest/doctest.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cfg = sluice::config;
namespace tls = sluice::tls;

namespace {

const std::string dir = std::string(SLUICE_TEST_DIR) + "/config/fixtures/upstream_tls";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
    return s;
}

// A fixture's text with DIR made the fixtures' folder.
std::string fixture_text(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return replace_all(s.str(), "DIR", dir);
}

std::shared_ptr<const cfg::config> load(const std::string& yaml, const std::string& name = "inline.yaml") {
    return cfg::load_string(yaml, name);
}

// The config_error building the context throws, or "" if none.
std::string context_error(const cfg::config& c) {
    try {
        tls::client_context ctx(c.upstreams.front());
    } catch (const cfg::config_error& e) {
        return e.what();
    }
    return "";
}

std::string sni_of(SSL* s) {
    const char* name = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
    return name ? name : "";
}

}  // namespace

TEST_CASE("upstream.tls fixtures: a file OpenSSL refuses is an error at its key") {
    std::vector<std::filesystem::path> fixtures;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".yaml" && e.path().filename().string().rfind("valid_", 0) != 0)
            fixtures.push_back(e.path());
    std::sort(fixtures.begin(), fixtures.end());
    CHECK(fixtures.size() == 4);
    for (const auto& f : fixtures) {
        CAPTURE(f.filename().string());
        const std::string text = fixture_text(f);
        const std::string first = text.substr(0, text.find('\n'));
        const std::string prefix = "# expect: FILE";
        REQUIRE(first.rfind(prefix, 0) == 0);
        const auto c = load(text, f.string());  // the file itself loads: the contents are the context's
        CHECK(context_error(*c) == f.string() + first.substr(prefix.size()));
    }
}

TEST_CASE("upstream.tls: a valid client certificate and CA build a context") {
    const auto c = load(fixture_text(dir + "/valid_mtls.yaml"));
    tls::client_context ctx(c->upstreams.front());
    CHECK(ctx.verifies());
    tls::session_cache cache;
    auto ssl = ctx.make_ssl(cache, c->upstreams.front().url.host);
    REQUIRE(ssl);
    CHECK(sni_of(ssl.get()) == "upstream.internal");
    CHECK(SSL_get_verify_mode(ssl.get()) == SSL_VERIFY_PEER);
    CHECK(SSL_get_min_proto_version(ssl.get()) == TLS1_2_VERSION);
    CHECK(SSL_get_certificate(ssl.get()) != nullptr);  // offered for mTLS
}

TEST_CASE("upstream.tls: SNI and the name verified come from the url's host, an address verified as one") {
    tls::session_cache cache;
    {
        const auto c = load("upstream: {url: 'https://api.example.com:8443'}\n");
        tls::client_context ctx(c->upstreams.front());  // the system's CAs
        auto ssl = ctx.make_ssl(cache, c->upstreams.front().url.host);
        CHECK(sni_of(ssl.get()) == "api.example.com");
        CHECK(std::string(SSL_get0_peername(ssl.get()) ? SSL_get0_peername(ssl.get()) : "") == "");  // until verified
        X509_VERIFY_PARAM* p = SSL_get0_param(ssl.get());
        CHECK(std::string(X509_VERIFY_PARAM_get0_host(p, 0)) == "api.example.com");
    }
    for (const char* url : {"https://127.0.0.1:8443", "https://[::1]"}) {
        CAPTURE(url);
        const auto c = load(std::string("upstream: {url: '") + url + "'}\n");
        tls::client_context ctx(c->upstreams.front());
        auto ssl = ctx.make_ssl(cache, c->upstreams.front().url.host);
        CHECK(sni_of(ssl.get()).empty());  // no SNI for an address (RFC 6066)
        X509_VERIFY_PARAM* p = SSL_get0_param(ssl.get());
        CHECK(X509_VERIFY_PARAM_get0_host(p, 0) == nullptr);
        char* ip = X509_VERIFY_PARAM_get1_ip_asc(p);
        REQUIRE(ip);
        CHECK((std::string(ip) == "127.0.0.1" || std::string(ip) == "0:0:0:0:0:0:0:1" || std::string(ip) == "::1"));
        OPENSSL_free(ip);
    }
    {
        const auto c = load("upstream: {url: 'https://127.0.0.1', tls: {verify: false}}\n");
        tls::client_context ctx(c->upstreams.front());
        CHECK_FALSE(ctx.verifies());
        CHECK(SSL_get_verify_mode(ctx.make_ssl(cache, "127.0.0.1").get()) == SSL_VERIFY_NONE);
    }
}

TEST_CASE("session_cache: a session is offered only on connections of the context that made it") {
    const auto c = load("upstream: {url: 'https://h'}\n");
    tls::client_context a(c->upstreams.front()), b(c->upstreams.front());
    tls::session_cache cache;
    CHECK(cache.get(a) == nullptr);
    SSL_SESSION* s = SSL_SESSION_new();
    cache.keep(a.native(), s);  // the cache holds the reference
    CHECK(cache.get(a) == s);
    CHECK(cache.get(b) == nullptr);  // after a reload, a new context starts afresh
    SSL_SESSION* t = SSL_SESSION_new();
    cache.keep(b.native(), t);  // the last one replaces it
    CHECK(cache.get(a) == nullptr);
    CHECK(cache.get(b) == t);
}
