// The TLS side of the listener: one OpenSSL context per certificate of server.tls, the one
// a handshake uses chosen by its SNI name, built from a config and shared by every worker.
//
// Protocols TLS 1.2 and 1.3 only (or 1.3 only), AEAD ciphers only (on TLS 1.2: ECDHE with
// AES-GCM or ChaCha20-Poly1305), no renegotiation, no compression. Session tickets are
// sealed with the process's ticket keys (ticket_keys), which every context of every
// config shares and which rotate: a client resumes whichever worker accepts it, and
// across reloads.
//
// Thread: built on any thread (a reload's), then immutable; new_session() from any
// worker at once (SSL_new on a shared SSL_CTX is thread-safe).
#pragma once

#include "config/config.hpp"
#include "tls/stream.hpp"

#include <openssl/ssl.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tls {

struct ctx_free {
    void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using ctx_ptr = std::unique_ptr<SSL_CTX, ctx_free>;

// The keys session tickets are sealed with: one for the process. A key seals new tickets
// for `rotate_every`, then only opens them for two periods more.
class ticket_keys {
public:
    static ticket_keys& process();
    static constexpr std::chrono::seconds rotate_every{3600};
    // OpenSSL's ticket key callback (SSL_CTX_set_tlsext_ticket_key_evp_cb).
    static int callback(SSL* ssl, unsigned char* name, unsigned char* iv, EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac,
                        int encrypt);

private:
    struct key {
        unsigned char name[16];
        unsigned char aes[32];
        unsigned char hmac[32];
        std::chrono::steady_clock::time_point made;
    };
    std::mutex mu_;
    std::deque<key> keys_;  // newest first
    void rotate(std::chrono::steady_clock::time_point now);
};

class server_contexts {
public:
    // Throws std::runtime_error naming the certificate when OpenSSL refuses it (the config
    // loader has checked the files already, so this is rare).
    explicit server_contexts(const config::tls_config& c);
    server_contexts(const server_contexts&) = delete;
    server_contexts& operator=(const server_contexts&) = delete;

    // A server-side SSL for a new connection, on the default context until SNI picks one.
    ssl_ptr new_session() const;

private:
    struct entry {
        ctx_ptr ctx;
        std::vector<std::string> names;
    };
    static int on_servername(SSL* ssl, int* alert, void* arg);
    static int on_alpn(SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                       unsigned int inlen, void* arg);
    SSL_CTX* context_for(std::string_view host) const;

    std::vector<entry> entries_;       // [0]: the default
    std::vector<unsigned char> alpn_;  // the configured protocols, in wire format
};

// After a handshake: "TLSv1.3", the SNI name asked for ("" = none), and the name of a
// verified client certificate that `which` chooses ("" = none, or not verified).
std::string_view version_of(SSL* ssl);
std::string_view sni_of(SSL* ssl);
std::string client_name(SSL* ssl, config::clients_config::certificate_name which);

}  // namespace sluice::tls
