#include "tls/server_context.hpp"
#include "tls/openssl.hpp"

#include "base/text.hpp"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <array>
#include <cstring>
#include <stdexcept>

namespace sluice::tls {

namespace {

using detail::no_passphrase;
using detail::openssl_reason;

using steady = std::chrono::steady_clock;

// TLS 1.2's suites: forward secret and AEAD only. TLS 1.3's are all AEAD (OpenSSL's default).
constexpr const char* tls12_ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

struct bio_free {
    void operator()(BIO* b) const { BIO_free(b); }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;
bio_ptr memory_bio(const std::string& text) {
    return bio_ptr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

void use_certificate(SSL_CTX* ctx, const config::tls_certificate& c) {
    auto fail = [&](const char* what) { throw std::runtime_error(c.at + ": " + what + ": " + openssl_reason()); };
    auto bio = memory_bio(c.cert_pem);
    X509* leaf = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (!leaf || SSL_CTX_use_certificate(ctx, leaf) != 1) {
        X509_free(leaf);
        fail("cannot use the certificate");
    }
    X509_free(leaf);
    while (X509* more = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
        if (SSL_CTX_add0_chain_cert(ctx, more) != 1) {
            X509_free(more);
            fail("cannot use the chain");
        }
    }
    ERR_clear_error();
    auto kbio = memory_bio(c.key_pem);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(kbio.get(), nullptr, no_passphrase, nullptr);
    const bool ok = key && SSL_CTX_use_PrivateKey(ctx, key) == 1 && SSL_CTX_check_private_key(ctx) == 1;
    EVP_PKEY_free(key);
    if (!ok) fail("cannot use the key");
}

void trust_client_ca(SSL_CTX* ctx, const config::tls_config& t) {
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
    auto bio = memory_bio(t.client_ca_pem);
    while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
        X509_STORE_add_cert(store, ca);
        sk_X509_NAME_push(names, X509_NAME_dup(X509_get_subject_name(ca)));
        X509_free(ca);
    }
    ERR_clear_error();
    SSL_CTX_set_client_CA_list(ctx, names);  // takes `names`
    int mode = SSL_VERIFY_PEER;
    if (t.client_certificates == config::tls_config::client_certs::required) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, nullptr);
    SSL_CTX_set_verify_depth(ctx, 8);
}

}  // namespace

ticket_keys& ticket_keys::process() {
    static ticket_keys keys;
    return keys;
}

void ticket_keys::rotate(steady::time_point now) {
    if (!keys_.empty() && now - keys_.front().made < rotate_every) return;
    key k{};
    if (RAND_bytes(k.name, sizeof k.name) != 1 || RAND_bytes(k.aes, sizeof k.aes) != 1 ||
        RAND_bytes(k.hmac, sizeof k.hmac) != 1)
        return;  // keep sealing with the key there is (or none: no ticket)
    k.made = now;
    keys_.push_front(k);
    while (keys_.size() > 3) keys_.pop_back();
}

int ticket_keys::callback(SSL*, unsigned char* name, unsigned char* iv, EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac,
                          int encrypt) {
    auto& self = process();
    std::lock_guard lock(self.mu_);  // per handshake that seals or opens a ticket, never per request
    const auto now = steady::now();
    self.rotate(now);
    if (self.keys_.empty()) return 0;  // no ticket (sealing), a full handshake (opening)
    auto init = [&](const key& k) {
        char digest[] = "SHA256";
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_END};
        return EVP_MAC_init(mac, k.hmac, sizeof k.hmac, params) == 1 &&
               (encrypt ? EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, k.aes, iv)
                        : EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, k.aes, iv)) == 1;
    };
    if (encrypt) {
        const key& k = self.keys_.front();
        if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1) return 0;
        std::memcpy(name, k.name, sizeof k.name);
        return init(k) ? 1 : 0;
    }
    for (std::size_t i = 0; i < self.keys_.size(); ++i) {
        const key& k = self.keys_[i];
        if (std::memcmp(name, k.name, sizeof k.name) != 0) continue;
        if (!init(k)) return 0;
        return i == 0 ? 1 : 2;  // 2: an older key opened it; seal a new ticket
    }
    return 0;  // unknown or retired key: a full handshake
}

server_contexts::server_contexts(const config::tls_config& t) {
    // A session resumes only under the client certificate settings it was made under: a
    // reload that changes the CA or the mode makes every client present (and verify) its
    // certificate again, instead of resuming the identity an old CA vouched for.
    std::array<unsigned char, 32> sid{};
    {
        const std::string what = t.client_ca_pem + '\n' + std::to_string(static_cast<int>(t.client_certificates));
        unsigned int n = 0;
        EVP_Digest(what.data(), what.size(), sid.data(), &n, EVP_sha256(), nullptr);
    }
    for (const auto& p : t.alpn) {
        alpn_.push_back(static_cast<unsigned char>(p.size()));
        alpn_.insert(alpn_.end(), p.begin(), p.end());
    }
    for (const auto& c : t.certificates) {
        ctx_ptr ctx(SSL_CTX_new(TLS_server_method()));
        if (!ctx) throw std::runtime_error(c.at + ": cannot make a TLS context: " + openssl_reason());
        SSL_CTX* x = ctx.get();
        SSL_CTX_set_min_proto_version(x, t.min_version);
        SSL_CTX_set_options(x, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
        if (SSL_CTX_set_cipher_list(x, tls12_ciphers) != 1)
            throw std::runtime_error(c.at + ": cipher list: " + openssl_reason());
        SSL_CTX_set_mode(x, SSL_MODE_RELEASE_BUFFERS);
        SSL_CTX_set_session_id_context(x, sid.data(), static_cast<unsigned>(sid.size()));
        if (t.session_tickets) {
            SSL_CTX_set_tlsext_ticket_key_evp_cb(x, ticket_keys::callback);
            SSL_CTX_set_session_cache_mode(x, SSL_SESS_CACHE_OFF);
            SSL_CTX_set_timeout(x, static_cast<long>(2 * ticket_keys::rotate_every.count()));
        } else {
            SSL_CTX_set_options(x, SSL_OP_NO_TICKET);
            SSL_CTX_set_num_tickets(x, 0);
            SSL_CTX_set_session_cache_mode(x, SSL_SESS_CACHE_OFF);
        }
        use_certificate(x, c);
        // client_certificates: none asks for no certificate, even with a client_ca_file.
        if (!t.client_ca_pem.empty() && t.client_certificates != config::tls_config::client_certs::none)
            trust_client_ca(x, t);
        SSL_CTX_set_tlsext_servername_callback(x, on_servername);
        SSL_CTX_set_tlsext_servername_arg(x, this);
        if (!alpn_.empty()) SSL_CTX_set_alpn_select_cb(x, on_alpn, this);
        entries_.push_back({std::move(ctx), c.names});
    }
    if (entries_.empty()) throw std::runtime_error("server.tls: no certificate");
}

ssl_ptr server_contexts::new_session() const {
    ssl_ptr s(SSL_new(entries_.front().ctx.get()));
    if (s) SSL_set_accept_state(s.get());
    return s;
}

SSL_CTX* server_contexts::context_for(std::string_view host) const {
    for (const auto& e : entries_)  // an exact name first, then a wildcard
        for (const auto& n : e.names)
            if (n == host) return e.ctx.get();
    for (const auto& e : entries_)
        for (const auto& n : e.names)
            if (base::name_covers(n, host)) return e.ctx.get();
    return nullptr;
}

int server_contexts::on_servername(SSL* ssl, int*, void* arg) {
    const auto* self = static_cast<const server_contexts*>(arg);
    const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (!name || self->entries_.size() == 1) return SSL_TLSEXT_ERR_OK;
    std::string host(name);
    for (char& ch : host) ch = base::ascii_lower(ch);
    if (SSL_CTX* ctx = self->context_for(host); ctx && ctx != SSL_get_SSL_CTX(ssl)) SSL_set_SSL_CTX(ssl, ctx);
    return SSL_TLSEXT_ERR_OK;
}

int server_contexts::on_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                             unsigned int inlen, void* arg) {
    const auto* self = static_cast<const server_contexts*>(arg);
    unsigned char* chosen = nullptr;
    if (SSL_select_next_proto(&chosen, outlen, self->alpn_.data(), static_cast<unsigned>(self->alpn_.size()), in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;  // no protocol in common: go on without ALPN (HTTP/1.1)
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
}

std::string_view version_of(SSL* ssl) { return SSL_get_version(ssl); }

std::string_view sni_of(SSL* ssl) {
    const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    return name ? std::string_view(name) : std::string_view();
}

std::string client_name(SSL* ssl, config::clients_config::certificate_name which) {
    using name = config::clients_config::certificate_name;
    if (which == name::none) return {};
    X509* cert = SSL_get0_peer_certificate(ssl);
    if (!cert || SSL_get_verify_result(ssl) != X509_V_OK) return {};
    // A resumed session carries the certificate verified when it was made: still in date?
    if (SSL_session_reused(ssl) && X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) return {};
    if (which == name::subject_cn) {
        char cn[256];
        const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
        return n > 0 ? std::string(cn, static_cast<std::size_t>(n)) : std::string();
    }
    const int type = which == name::san_dns ? GEN_DNS : which == name::san_uri ? GEN_URI : GEN_EMAIL;
    std::string out;
    if (auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))) {
        for (int i = 0; i < sk_GENERAL_NAME_num(sans) && out.empty(); ++i) {
            const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
            if (g->type != type) continue;
            const ASN1_IA5STRING* s = g->d.ia5;  // dNSName, uniformResourceIdentifier and rfc822Name alike
            out.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                       static_cast<std::size_t>(ASN1_STRING_length(s)));
        }
        GENERAL_NAMES_free(sans);
    }
    return out;
}

}  // namespace sluice::tls
