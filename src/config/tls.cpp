// server.tls: the TLS listener's certificates, read and checked at load with OpenSSL (a
// file that is not PEM, a key that is not the certificate's, an expired certificate are
// errors at their key), and clients.user.certificate's companion checks.
#include <arpa/inet.h>

#include <algorithm>
#include <ctime>
#include <memory>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "base/text.hpp"
#include "config/readers.hpp"
#include "config/stable_file.hpp"

namespace sluice::config::detail {

namespace {

struct bio_free {
    void operator()(BIO* b) const { BIO_free(b); }
};
struct x509_free {
    void operator()(X509* x) const { X509_free(x); }
};
struct pkey_free {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;

// An encrypted key is refused, never prompted for on a terminal.
int no_passphrase(char*, int, int, void*) { return -1; }

bio_ptr memory_bio(const std::string& text) {
    return bio_ptr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The file at `v` (readable, read whole) and the path as written.
std::string read_pem_file(const node_ref& v, std::string& path) {
    path = read_readable_file(v);
    try {
        return read_stable_file(path);
    } catch (const std::exception& e) {
        v.fail(e.what());
    }
}

// The certificates of a PEM text, in order; none when it holds none.
std::vector<x509_ptr> certificates_of(const std::string& pem) {
    std::vector<x509_ptr> out;
    auto bio = memory_bio(pem);
    while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(x);
    ERR_clear_error();  // the end of the text reads as an error
    return out;
}

std::int64_t unix_time(const ASN1_TIME* t) {
    std::tm tm{};
    if (ASN1_TIME_to_tm(t, &tm) != 1) return 0;
    return static_cast<std::int64_t>(timegm(&tm));
}

std::string utc_text(std::int64_t t) {
    const std::time_t tt = static_cast<std::time_t>(t);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char buf[32];
    return std::string(buf, std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm));
}

// DNS names and IP addresses of the subjectAltName; the subject's CN when it has no DNS name.
std::vector<std::string> names_of(X509* x) {
    std::vector<std::string> out;
    bool dns = false;
    if (auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr))) {
        for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
            const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
            if (g->type == GEN_DNS) {
                const auto* s = g->d.dNSName;
                out.push_back(to_lower(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                                   static_cast<std::size_t>(ASN1_STRING_length(s)))));
                dns = true;
            } else if (g->type == GEN_IPADD) {
                const ASN1_OCTET_STRING* ip = g->d.iPAddress;
                const int len = ASN1_STRING_length(ip);
                char text[INET6_ADDRSTRLEN];
                if ((len == 4 || len == 16) &&
                    inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(ip), text, sizeof text))
                    out.emplace_back(text);
            }
        }
        GENERAL_NAMES_free(sans);
    }
    if (!dns) {
        char cn[256];
        const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
        if (n > 0) out.push_back(to_lower(std::string(cn, static_cast<std::size_t>(n))));
    }
    return out;
}

tls_certificate read_certificate(const node_ref& n) {
    tls_certificate c;
    std::optional<node_ref> cert_at, key_at;
    read_mapping(n, {
                        {"cert_file",
                         [&](const node_ref& v) {
                             c.cert_pem = read_pem_file(v, c.cert_file);
                             cert_at = v;
                         },
                         presence::required},
                        {"key_file",
                         [&](const node_ref& v) {
                             c.key_pem = read_pem_file(v, c.key_file);
                             key_at = v;
                         },
                         presence::required},
                    });
    if (!cert_at || !key_at) return c;  // describing
    auto chain = certificates_of(c.cert_pem);
    if (chain.empty()) cert_at->fail(c.cert_file + " holds no PEM certificate");
    auto bio = memory_bio(c.key_pem);
    pkey_ptr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
    ERR_clear_error();
    if (!key) key_at->fail(c.key_file + " holds no PEM private key (an encrypted key is not read)");
    X509* leaf = chain.front().get();
    if (X509_check_private_key(leaf, key.get()) != 1) {
        ERR_clear_error();
        key_at->fail("the key in " + c.key_file + " does not match the certificate in " + c.cert_file);
    }
    c.not_after = unix_time(X509_get0_notAfter(leaf));
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0)
        cert_at->fail("the certificate in " + c.cert_file + " expired on " + utc_text(c.not_after));
    c.names = names_of(leaf);
    c.at = n.where();
    return c;
}

int read_tls_version(const node_ref& v) {
    const auto s = read_string(v);
    if (s == "1.2") return 0x0303;
    if (s == "1.3") return 0x0304;
    v.fail(R"(expected "1.2" or "1.3" (no TLS below 1.2 is served))");
}

std::string read_alpn(const node_ref& v) {
    auto s = read_string(v);
    if (s != "http/1.1") v.fail(R"(expected "http/1.1" (the only protocol served over TLS))");
    return s;
}

tls_config::client_certs read_client_certs(const node_ref& v) {
    using c = tls_config::client_certs;
    const auto s = schema::read_choice(v, {"none", "optional", "required"});
    return s == "required" ? c::required : s == "optional" ? c::optional : c::none;
}

// server.tls.listen is taken at start, and so is whether there is a TLS listener at all;
// the certificates and the rest are taken at every reload.
bool keep_tls_listener(config& next, const config& running) {
    auto& n = next.server.tls;
    const auto& r = running.server.tls;
    if (!n && !r) return false;
    if (!n || !r) {
        n = r;
        return true;
    }
    if (n->listen == r->listen) return false;
    n->listen = r->listen;
    return true;
}

}  // namespace

// Reads the PEM certificates (at least one) of a CA file.
std::string read_ca_file(const node_ref& v, std::string& path) {
    auto pem = read_pem_file(v, path);
    if (certificates_of(pem).empty()) v.fail(path + " holds no PEM certificate");
    return pem;
}

tls_config read_tls(const node_ref& n) {
    tls_config t;
    std::optional<node_ref> certs_at, mode_at;
    read_mapping(
        n,
        {
            {"listen", [&](const node_ref& v) { t.listen = read_address(v); }, presence::required, keep_tls_listener},
            {"certificates",
             [&](const node_ref& v) {
                 read_list(v, empty_list::refused,
                           [&](const node_ref& item) { t.certificates.push_back(read_certificate(item)); });
                 certs_at = v;
             },
             presence::required},
            {"min_version", [&](const node_ref& v) { t.min_version = read_tls_version(v); }},
            {"alpn", [&](const node_ref& v) { t.alpn = read_distinct(v, read_alpn); }},
            {"handshake_timeout", [&](const node_ref& v) { t.handshake_timeout = read_duration(v, zero::refused); }},
            {"session_tickets", [&](const node_ref& v) { t.session_tickets = schema::read_bool(v); }},
            {"max_handshakes",
             [&](const node_ref& v) { t.max_handshakes = schema::read_uint_as<std::size_t>(v, 1, 1'000'000); }},
            {"client_ca_file", [&](const node_ref& v) { t.client_ca_pem = read_ca_file(v, t.client_ca_file); }},
            {"client_certificates",
             [&](const node_ref& v) {
                 t.client_certificates = read_client_certs(v);
                 mode_at = v;
             }},
        });
    if (t.client_ca_file.empty() && t.client_certificates != tls_config::client_certs::none && mode_at)
        mode_at->fail("needs client_ca_file (the CA client certificates are verified against)");
    if (!t.client_ca_file.empty() && !mode_at) t.client_certificates = tls_config::client_certs::optional;
    return t;
}

void check_tls(config& c) {
    if (c.clients.user_certificate != clients_config::certificate_name::none &&
        (!c.server.tls || c.server.tls->client_ca_file.empty()))
        throw config_error(c.clients.user_certificate_at +
                           ": needs server.tls.client_ca_file (only a verified client certificate names a user)");
    if (c.clients.user_certificate != clients_config::certificate_name::none &&
        c.server.tls->client_certificates == tls_config::client_certs::none)
        throw config_error(c.clients.user_certificate_at +
                           ": server.tls.client_certificates is none: no client certificate is asked for, so none "
                           "would name a user");
    if (!c.server.tls) return;
    const auto& certs = c.server.tls->certificates;
    for (std::size_t i = 0; i < c.routes.size(); ++i) {
        const auto& host = c.routes[i].host;
        if (host.empty()) continue;
        const bool covered = std::any_of(certs.begin(), certs.end(), [&](const tls_certificate& cert) {
            return std::any_of(cert.names.begin(), cert.names.end(),
                               [&](const std::string& name) { return base::name_covers(name, host); });
        });
        if (!covered)
            c.warnings.push_back(
                c.routes[i].host_at + ": " + host +
                " is a name no certificate of server.tls.certificates covers: a TLS client asking "
                "for it gets the default certificate, for " +
                (certs.empty() || certs.front().names.empty() ? std::string("no name") : certs.front().names.front()));
    }
}

}  // namespace sluice::config::detail
