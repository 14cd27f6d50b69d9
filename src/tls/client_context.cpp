#include "tls/client_context.hpp"
#include "tls/openssl.hpp"

#include <boost/asio/ip/address.hpp>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>
#include <stdexcept>

namespace sluice::tls {

namespace {

using detail::no_passphrase;
using detail::openssl_reason;

// Where an SSL finds its worker's cache.
int cache_index() {
    static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return index;
}

// What OpenSSL queued says little more than "not PEM": the message names the file instead.
[[noreturn]] void refuse(const std::string& at, const std::string& reason) {
    ERR_clear_error();
    throw config::config_error(at + ": " + reason);
}

// A new session from the upstream: a copy is kept as the worker's next offer. A copy, for
// OpenSSL marks a connection's own session unresumable when the connection is freed without
// close_notify, as a pooled connection the pool does not keep is.
int on_new_session(SSL* ssl, SSL_SESSION* s) {
    auto* cache = static_cast<session_cache*>(SSL_get_ex_data(ssl, cache_index()));
    if (!cache || !SSL_SESSION_is_resumable(s)) return 0;
    if (SSL_SESSION* copy = SSL_SESSION_dup(s)) cache->keep(SSL_get_SSL_CTX(ssl), copy);
    return 0;  // the connection's reference stays OpenSSL's
}

struct pkey_free {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

struct file_close {
    void operator()(std::FILE* f) const { std::fclose(f); }
};

// The client certificate and its key; the key must be the certificate's.
void load_client_certificate(SSL_CTX* ctx, const config::upstream_tls_config& c) {
    if (SSL_CTX_use_certificate_chain_file(ctx, c.cert_file.c_str()) != 1)
        refuse(c.cert_file_at, "found no valid PEM certificate in " + c.cert_file);
    std::unique_ptr<std::FILE, file_close> f(std::fopen(c.key_file.c_str(), "r"));
    if (!f) refuse(c.key_file_at, "cannot read " + c.key_file);
    std::unique_ptr<EVP_PKEY, pkey_free> key(PEM_read_PrivateKey(f.get(), nullptr, no_passphrase, nullptr));
    if (!key) refuse(c.key_file_at, "found no valid PEM private key in " + c.key_file);
    if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        refuse(c.key_file_at,
               "the key in " + c.key_file + " is not the private key of the certificate in " + c.cert_file);
    }
}

}  // namespace

client_context::client_context(const config::upstream_config& c)
    : ctx_(SSL_CTX_new(TLS_client_method())), verify_(c.tls.verify) {
    if (!ctx_) throw std::runtime_error("cannot make a TLS context: " + openssl_reason());
    try {
        const auto& t = c.tls;
        SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
        SSL_CTX_set_verify(ctx_, verify_ ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
        if (!t.ca_file.empty()) {
            if (SSL_CTX_load_verify_locations(ctx_, t.ca_file.c_str(), nullptr) != 1)
                refuse(t.ca_file_at, "found no valid PEM certificate in " + t.ca_file);
        } else if (SSL_CTX_set_default_verify_paths(ctx_) != 1) {
            throw std::runtime_error("cannot load the system's CA certificates: " + openssl_reason());
        }
        if (!t.cert_file.empty()) load_client_certificate(ctx_, t);
        // Sessions are kept by each worker (session_cache), none in the context.
        SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(ctx_, on_new_session);
        name_ = t.server_name;
    } catch (...) {
        SSL_CTX_free(ctx_);
        throw;
    }
}

client_context::~client_context() { SSL_CTX_free(ctx_); }

ssl_ptr client_context::make_ssl(session_cache& cache, const std::string& host) const {
    ssl_ptr ssl(SSL_new(ctx_));
    if (!ssl) throw std::bad_alloc();
    SSL* s = ssl.get();
    SSL_set_connect_state(s);
    const std::string& name = name_.empty() ? host : name_;
    boost::system::error_code ec;
    boost::asio::ip::make_address(name, ec);
    if (!ec) {
        // No SNI for an address (RFC 6066 section 3); the certificate must name the address.
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), name.c_str());
    } else {
        SSL_set_tlsext_host_name(s, name.c_str());
        SSL_set_hostflags(s, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        SSL_set1_host(s, name.c_str());
    }
    SSL_set_ex_data(s, cache_index(), &cache);
    // A copy again: the connection may mark the session it used unresumable when it goes.
    if (SSL_SESSION* last = cache.get(*this)) {
        if (SSL_SESSION* copy = SSL_SESSION_dup(last)) {
            SSL_set_session(s, copy);
            SSL_SESSION_free(copy);
        }
    }
    return ssl;
}

session_cache::~session_cache() {
    SSL_SESSION_free(session_);
    SSL_CTX_free(ctx_);
}

SSL_SESSION* session_cache::get(const client_context& ctx) const { return ctx_ == ctx.native() ? session_ : nullptr; }

void session_cache::keep(SSL_CTX* ctx, SSL_SESSION* s) {
    SSL_SESSION_free(session_);
    session_ = s;
    if (ctx != ctx_) {
        SSL_CTX_up_ref(ctx);
        SSL_CTX_free(ctx_);
        ctx_ = ctx;
    }
}

std::string handshake_failure(SSL* ssl, const error_code& ec) {
    const long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) return std::string("certificate verification failed: ") + X509_verify_cert_error_string(v);
    return ec.message();
}

}  // namespace sluice::tls
