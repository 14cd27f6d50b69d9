// server.tls and clients.user.certificate at load: the certificates read and checked
// (PEM, key match, expiry), every error at its key as FILE:LINE:COLUMN: path: reason, and
// the warning for a route host no certificate covers. The certificates are made with the
// openssl CLI by tests/support/make_tls_files.sh.
#include <doctest/doctest.h>

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "config/config.hpp"
#include "load_error.hpp"

namespace cfg = sluice::config;
using sluice::config::testing::error_of;
using namespace std::chrono_literals;

namespace {

struct pki_files {
    pki_files() {
        char tmpl[] = "/tmp/sluice-tls-config-XXXXXX";
        dir = ::mkdtemp(tmpl);
        const std::string command =
            "sh '" + std::string(SLUICE_TEST_DIR) + "/support/make_tls_files.sh' '" + dir + "' >/dev/null 2>&1";
        made = std::system(command.c_str()) == 0;
    }
    ~pki_files() { std::filesystem::remove_all(dir); }
    std::string dir;
    bool made = false;
};

std::string pki(const std::string& name) {
    static pki_files files;
    REQUIRE_MESSAGE(files.made, "tests/support/make_tls_files.sh failed");
    return files.dir + "/" + name;
}

// Line 6 holds the certificate, `more` follows at the indentation of server.tls's keys.
std::string tls_yaml(const std::string& cert, const std::string& key, const std::string& more = "",
                     const std::string& after = "") {
    return "upstream: {url: 'http://h'}\n"
           "server:\n"
           "  tls:\n"
           "    listen: '127.0.0.1:8443'\n"
           "    certificates:\n"
           "      - {cert_file: '" +
           cert + "', key_file: '" + key + "'}\n" + more + after;
}

// "inline.yaml:LINE:COLUMN: " with the column where `needle` starts (its first or last
// occurrence) on line `line` of `yaml`.
std::string at(const std::string& yaml, int line, const std::string& needle, bool last = false) {
    std::size_t start = 0;
    for (int i = 1; i < line; ++i) start = yaml.find('\n', start) + 1;
    const auto end = yaml.find('\n', start);
    const auto text = yaml.substr(start, end - start);
    const auto col = last ? text.rfind(needle) : text.find(needle);
    REQUIRE(col != std::string::npos);
    return "inline.yaml:" + std::to_string(line) + ":" + std::to_string(col + 1) + ": ";
}

std::int64_t not_after_of(const std::string& pem_file) {
    FILE* f = std::fopen(pem_file.c_str(), "r");
    REQUIRE(f);
    X509* x = PEM_read_X509(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    REQUIRE(x);
    std::tm tm{};
    ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm);
    X509_free(x);
    return static_cast<std::int64_t>(timegm(&tm));
}

}  // namespace

TEST_CASE("server.tls: certificates read with their names and expiry, every default") {
    const auto yaml = tls_yaml(pki("a.pem"), pki("server.key"),
                               "      - {cert_file: '" + pki("wild.pem") + "', key_file: '" + pki("server.key") +
                                   "'}\n"
                                   "      - {cert_file: '" +
                                   pki("cn-only.pem") + "', key_file: '" + pki("server.key") + "'}\n");
    const auto c = cfg::load_string(yaml, "inline.yaml");
    REQUIRE(c->server.tls);
    const auto& t = *c->server.tls;
    CHECK(t.listen.to_string() == "127.0.0.1:8443");
    REQUIRE(t.certificates.size() == 3);
    CHECK(t.certificates[0].names == std::vector<std::string>{"a.test", "127.0.0.1"});
    CHECK(t.certificates[1].names == std::vector<std::string>{"*.w.test"});
    CHECK(t.certificates[2].names == std::vector<std::string>{"cn-only.test"});  // no SAN: the CN
    CHECK(t.certificates[0].cert_file == pki("a.pem"));
    CHECK(t.certificates[0].key_file == pki("server.key"));
    CHECK(t.certificates[0].cert_pem.rfind("-----BEGIN CERTIFICATE-----", 0) == 0);
    CHECK(t.certificates[0].key_pem.find("PRIVATE KEY-----") != std::string::npos);
    CHECK(t.certificates[0].not_after == not_after_of(pki("a.pem")));
    CHECK(t.certificates[0].at == "inline.yaml:6:9: server.tls.certificates[0]");
    CHECK(t.min_version == 0x0303);
    CHECK(t.alpn == std::vector<std::string>{"http/1.1"});
    CHECK(t.handshake_timeout == 0ms);  // server.header_timeout
    CHECK(t.session_tickets);
    CHECK(t.max_handshakes == 256);
    CHECK(t.client_ca_file.empty());
    CHECK(t.client_certificates == cfg::tls_config::client_certs::none);
    CHECK(c->clients.user_certificate == cfg::clients_config::certificate_name::none);
    CHECK(c->warnings.empty());
    CHECK_FALSE(cfg::load_string("upstream: {url: 'http://h'}\n", "inline.yaml")->server.tls);
}

TEST_CASE("server.tls: every setting, and client certificates optional by default with a CA") {
    const auto base = tls_yaml(pki("a.pem"), pki("server.key"),
                               "    min_version: '1.3'\n    alpn: [http/1.1]\n    handshake_timeout: 5s\n"
                               "    session_tickets: false\n    max_handshakes: 8\n    client_ca_file: '" +
                                   pki("ca.pem") + "'\n");
    auto c = cfg::load_string(base + "    client_certificates: required\n", "inline.yaml");
    const auto& t = *c->server.tls;
    CHECK(t.min_version == 0x0304);
    CHECK(t.handshake_timeout == 5s);
    CHECK_FALSE(t.session_tickets);
    CHECK(t.max_handshakes == 8);
    CHECK(t.client_ca_file == pki("ca.pem"));
    CHECK(t.client_ca_pem.rfind("-----BEGIN CERTIFICATE-----", 0) == 0);
    CHECK(t.client_certificates == cfg::tls_config::client_certs::required);

    c = cfg::load_string(base, "inline.yaml");
    CHECK(c->server.tls->client_certificates == cfg::tls_config::client_certs::optional);
    c = cfg::load_string(base + "    client_certificates: none\n", "inline.yaml");
    CHECK(c->server.tls->client_certificates == cfg::tls_config::client_certs::none);

    using name = cfg::clients_config::certificate_name;
    const std::pair<const char*, name> choices[] = {{"subject_cn", name::subject_cn},
                                                    {"san_dns", name::san_dns},
                                                    {"san_uri", name::san_uri},
                                                    {"san_email", name::san_email}};
    for (const auto& [text, value] : choices) {
        CAPTURE(text);
        c = cfg::load_string(base + "clients: {user: {certificate: " + text + "}}\n", "inline.yaml");
        CHECK(c->clients.user_certificate == value);
    }
}

TEST_CASE("server.tls: a certificate or key file unreadable, not PEM, not matching, expired") {
    const auto cert_error = [](const std::string& cert, const std::string& key) {
        const auto yaml = tls_yaml(cert, key);
        return std::make_pair(error_of(yaml), at(yaml, 6, "'" + cert) + "server.tls.certificates[0].cert_file: ");
    };
    const auto key_error = [](const std::string& cert, const std::string& key) {
        const auto yaml = tls_yaml(cert, key);
        return std::make_pair(error_of(yaml), at(yaml, 6, "'" + key, true) + "server.tls.certificates[0].key_file: ");
    };
    const auto missing = pki("none.pem");
    auto [e, where] = cert_error(missing, pki("server.key"));
    CHECK(e == where + "no such file: " + missing);
    std::tie(e, where) = key_error(pki("a.pem"), missing);
    CHECK(e == where + "no such file: " + missing);

    std::tie(e, where) = cert_error(pki("not-pem.txt"), pki("server.key"));
    CHECK(e == where + pki("not-pem.txt") + " holds no PEM certificate");
    std::tie(e, where) = cert_error(pki("server.key"), pki("server.key"));  // a key is no certificate
    CHECK(e == where + pki("server.key") + " holds no PEM certificate");
    std::tie(e, where) = key_error(pki("a.pem"), pki("not-pem.txt"));
    CHECK(e == where + pki("not-pem.txt") + " holds no PEM private key (an encrypted key is not read)");
    std::tie(e, where) = key_error(pki("a.pem"), pki("a.pem"));  // a certificate is no key
    CHECK(e == where + pki("a.pem") + " holds no PEM private key (an encrypted key is not read)");

    std::tie(e, where) = key_error(pki("a.pem"), pki("alice.key"));
    CHECK(e == where + "the key in " + pki("alice.key") + " does not match the certificate in " + pki("a.pem"));
    std::tie(e, where) = cert_error(pki("expired.pem"), pki("server.key"));
    CHECK(e == where + "the certificate in " + pki("expired.pem") + " expired on 2020-01-02 00:00:00 UTC");

    if (::geteuid() != 0) {  // root reads anything
        const auto dir = std::filesystem::path(pki("a.pem")).parent_path() / "locked";
        std::filesystem::create_directories(dir);
        const auto key = (dir / "server.key").string();
        std::filesystem::copy_file(pki("server.key"), key, std::filesystem::copy_options::overwrite_existing);
        std::filesystem::permissions(key, std::filesystem::perms::none);
        std::tie(e, where) = key_error(pki("a.pem"), key);
        CHECK(e == where + "cannot read " + key + ": Permission denied");
    }
}

TEST_CASE("server.tls: client certificate settings that cannot work, and the other keys' bounds") {
    const auto a = pki("a.pem"), key = pki("server.key");
    const auto with = [&](const std::string& more, const std::string& after = "") {
        const auto yaml = tls_yaml(a, key, more, after);
        return std::make_pair(yaml, error_of(yaml));
    };
    auto [yaml, e] = with("    client_certificates: optional\n");
    CHECK(e == at(yaml, 7, "optional") +
                   "server.tls.client_certificates: needs client_ca_file (the CA client certificates are verified "
                   "against)");
    std::tie(yaml, e) = with("    client_certificates: required\n");
    CHECK(e == at(yaml, 7, "required") +
                   "server.tls.client_certificates: needs client_ca_file (the CA client certificates are verified "
                   "against)");
    std::tie(yaml, e) = with("    client_certificates: none\n");  // nothing asked for, nothing needed
    CHECK(e == "<no error>");
    std::tie(yaml, e) = with("    client_ca_file: '" + pki("not-pem.txt") + "'\n");
    CHECK(e == at(yaml, 7, "'") + "server.tls.client_ca_file: " + pki("not-pem.txt") + " holds no PEM certificate");
    std::tie(yaml, e) = with("", "clients: {user: {certificate: subject_cn}}\n");
    CHECK(e == at(yaml, 7, "subject_cn") +
                   "clients.user.certificate: needs server.tls.client_ca_file (only a verified client certificate "
                   "names a user)");

    std::tie(yaml, e) = with("    client_ca_file: '" + pki("ca.pem") + "'\n    client_certificates: none\n",
                             "clients: {user: {certificate: subject_cn}}\n");
    CHECK(e == at(yaml, 9, "subject_cn") +
                   "clients.user.certificate: server.tls.client_certificates is none: no client certificate is "
                   "asked for, so none would name a user");

    std::tie(yaml, e) = with("    min_version: '1.1'\n");
    CHECK(e ==
          at(yaml, 7, "'1.1'") + "server.tls.min_version: expected \"1.2\" or \"1.3\" (no TLS below 1.2 is served)");
    std::tie(yaml, e) = with("    alpn: [h2]\n");
    CHECK(e == at(yaml, 7, "h2") + "server.tls.alpn[0]: expected \"http/1.1\" (the only protocol served over TLS)");
    std::tie(yaml, e) = with("    max_handshakes: 0\n");
    CHECK(e.rfind(at(yaml, 7, "0") + "server.tls.max_handshakes: ", 0) == 0);
    std::tie(yaml, e) = with("    handshake_timeout: 0s\n");
    CHECK(e.rfind(at(yaml, 7, "0s") + "server.tls.handshake_timeout: ", 0) == 0);
    std::tie(yaml, e) = with("    client_certificates: maybe\n");
    CHECK(e.rfind(at(yaml, 7, "maybe") + "server.tls.client_certificates: ", 0) == 0);
    std::tie(yaml, e) = with("    ciphers: RC4\n");
    CHECK(e.find("server.tls.ciphers: unknown key") != std::string::npos);

    yaml = "upstream: {url: 'http://h'}\nserver:\n  tls: {listen: '127.0.0.1:8443', certificates: []}\n";
    CHECK(error_of(yaml) == at(yaml, 3, "[]") + "server.tls.certificates: must not be empty");
    CHECK(error_of("upstream: {url: 'http://h'}\nserver:\n  tls: {certificates: [{cert_file: '" + a + "', key_file: '" +
                   key + "'}]}\n") == "inline.yaml:3:8: server.tls.listen: required key is missing");
    CHECK(error_of("upstream: {url: 'http://h'}\nserver:\n  tls: {listen: '127.0.0.1:8443'}\n") ==
          "inline.yaml:3:8: server.tls.certificates: required key is missing");
}

TEST_CASE("server.tls: a route host no certificate covers is a warning at its position") {
    const auto routes = [](const std::string& host) {
        return "routes:\n  - {match: {path_prefix: /, host: " + host + "}, policy: none}\n";
    };
    const auto wild = "      - {cert_file: '" + pki("wild.pem") + "', key_file: '" + pki("server.key") + "'}\n";
    for (const char* covered : {"a.test", "A.Test", "x.w.test"}) {
        CAPTURE(covered);
        CHECK(cfg::load_string(tls_yaml(pki("a.pem"), pki("server.key"), wild, routes(covered)), "inline.yaml")
                  ->warnings.empty());
    }
    for (const char* uncovered : {"c.test", "y.x.w.test", "w.test"}) {
        CAPTURE(uncovered);
        const auto yaml = tls_yaml(pki("a.pem"), pki("server.key"), wild, routes(uncovered));
        const auto c = cfg::load_string(yaml, "inline.yaml");
        CAPTURE(c->warnings.front());
        CHECK(c->warnings == std::vector<std::string>{
                                 at(yaml, 9, uncovered) + "routes[0].match.host: " + uncovered +
                                 " is a name no certificate of server.tls.certificates covers: a TLS client asking "
                                 "for it gets the default certificate, for a.test"});
    }
    // Without server.tls, no certificate is expected.
    CHECK(cfg::load_string("upstream: {url: 'http://h'}\n" + routes("c.test"), "inline.yaml")->warnings.empty());
}
