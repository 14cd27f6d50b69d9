// The TLS listener's handshake (tls/server_context.hpp) on a client's first flight: any
// bytes, as a ClientHello would come, into a server SSL from tls::server_contexts over a pair
// of memory BIOs, so that OpenSSL's record and handshake parsing and our SNI and ALPN
// callbacks run on arbitrary hellos. Input: one byte choosing the server (bits 0-1: one of
// three configs; bit 2: the bytes arrive in two pieces, cut where byte 1 says), then the
// bytes. Checks: no crash, and the handshake never completes (a client's first flight alone
// cannot finish one): it asks for more bytes, or fails.
//
// The certificates are made at start-up with OpenSSL (EC P-256, self-signed): a.example
// (the default) and *.b.example, so the SNI callback has a choice to make. The seeds
// (corpus/fuzz_tls_hello/) are real ClientHellos from Python's ssl module (OpenSSL 3):
// TLS 1.3 and 1.2, with and without SNI and ALPN, each with a first byte for each config.
#include "check.hpp"
#include "config/config.hpp"
#include "tls/server_context.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

using namespace sluice;
using fuzz::check;

namespace {

std::string pem_of(BIO* b) {
    char* p = nullptr;
    const long n = BIO_get_mem_data(b, &p);
    return std::string(p, static_cast<std::size_t>(n));
}

// A self-signed EC P-256 certificate for `name` (its CN and its one DNS SAN), as PEM.
config::tls_certificate make_certificate(const std::string& name) {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* x = X509_new();
    check(key && x, "cannot make a key");
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 7 * 24 * 3600);
    X509_set_pubkey(x, key);
    X509_NAME* subject = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1,
                               -1, 0);
    X509_set_issuer_name(x, subject);
    const std::string san = "DNS:" + name;
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, san.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    check(X509_sign(x, key, EVP_sha256()) > 0, "cannot sign the certificate");

    BIO* cb = BIO_new(BIO_s_mem());
    BIO* kb = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(cb, x);
    PEM_write_bio_PrivateKey(kb, key, nullptr, nullptr, 0, nullptr, nullptr);
    config::tls_certificate c;
    c.cert_file = name + ".pem";
    c.key_file = name + ".key";
    c.cert_pem = pem_of(cb);
    c.key_pem = pem_of(kb);
    c.names = {name};
    c.at = "fuzz: " + name;
    BIO_free(cb);
    BIO_free(kb);
    X509_free(x);
    EVP_PKEY_free(key);
    return c;
}

struct servers {
    std::array<std::unique_ptr<tls::server_contexts>, 3> variants;

    servers() {
        config::tls_config t;
        t.certificates = {make_certificate("a.example"), make_certificate("*.b.example")};
        // 0: the defaults (TLS 1.2+, tickets, ALPN http/1.1)
        variants[0] = std::make_unique<tls::server_contexts>(t);
        // 1: TLS 1.3 only, no tickets, two ALPN protocols
        auto t1 = t;
        t1.min_version = 0x0304;
        t1.session_tickets = false;
        t1.alpn = {"h2", "http/1.1"};
        variants[1] = std::make_unique<tls::server_contexts>(t1);
        // 2: client certificates asked for (optional), trusting the first certificate
        auto t2 = t;
        t2.client_ca_pem = t.certificates[0].cert_pem;
        t2.client_certificates = config::tls_config::client_certs::optional;
        variants[2] = std::make_unique<tls::server_contexts>(t2);
    }
};

const servers& the_servers() {
    static const servers s;
    return s;
}

// One step of the handshake on what has arrived: it must not complete. True: it asks for more.
bool step(SSL* ssl) {
    const int r = SSL_do_handshake(ssl);
    check(r != 1, "a handshake completed on a client's first flight alone");
    const int e = SSL_get_error(ssl, r);
    check(e == SSL_ERROR_WANT_READ || e == SSL_ERROR_SSL || e == SSL_ERROR_ZERO_RETURN,
          "the handshake neither waits for bytes nor fails");
    ERR_clear_error();
    return e == SSL_ERROR_WANT_READ;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    the_servers();  // the keys and certificates once, not in the first input's time
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const unsigned choice = data[0];
    const auto& server = *the_servers().variants[(choice & 3) % 3];
    const unsigned char* hello = data + 1;
    const std::size_t n = size - 1;
    const std::size_t cut = (choice & 4) ? data[1] % n : n;

    tls::ssl_ptr ssl = server.new_session();
    check(ssl != nullptr, "no SSL");
    BIO* in = BIO_new(BIO_s_mem());  // what the client sent; empty = "retry", not EOF
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl.get(), in, out);  // the SSL owns both
    bool more = true;
    if (cut > 0) {
        BIO_write(in, hello, static_cast<int>(cut));
        more = step(ssl.get());
    }
    if (cut < n && more) {  // the rest, as a second read would bring it (not after a failure)
        BIO_write(in, hello + cut, static_cast<int>(n - cut));
        step(ssl.get());
    }
    // What the listener reads after a handshake, whatever state it stopped in.
    (void)tls::version_of(ssl.get());
    (void)tls::sni_of(ssl.get());
    return 0;
}
