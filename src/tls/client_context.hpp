// TLS to https upstream servers: the client context one pool's configuration builds, and the
// session a worker offers on its next connection to one server.
//
// client_context holds one SSL_CTX (TLS 1.2 at least; the server verified against
// tls.ca_file or the system's CAs, under its server_name or the server url's host; the
// client certificate for mTLS). It is built with the config snapshot, at start, on --check
// and on every reload, so changed files take effect for new upstream connections, and
// shared by every worker: SSL_new on a shared SSL_CTX is thread-safe, and nothing else
// touches it after construction.
//
// session_cache is a worker's own: the last session the upstream gave it (a TLS 1.3 ticket
// arrives after the handshake, read with the first response; OpenSSL hands it over through
// the context's new-session callback), offered on that worker's next connection so that the
// handshake resumes. A session belongs to the context that made it: after a reload, a new
// context starts afresh (its CAs or certificate may differ). The cache holds a reference to
// that context, so that its address cannot be another context's meanwhile.
//
// Thread: client_context is immutable and shared; a session_cache and the SSL objects made
// with it belong to one worker's thread.
#pragma once

#include "config/config.hpp"
#include "tls/stream.hpp"

#include <openssl/ssl.h>

#include <memory>
#include <string>

namespace sluice::tls {

class session_cache;

class client_context {
public:
    // Throws config::config_error at the key whose file OpenSSL refuses (a CA file without
    // a certificate, a certificate or key that does not load, a key that is not the
    // certificate's), std::runtime_error if OpenSSL fails otherwise.
    explicit client_context(const config::upstream_config& c);
    ~client_context();
    client_context(const client_context&) = delete;
    client_context& operator=(const client_context&) = delete;

    // A client SSL for one connection to `host` (a server's url host): SNI (for a name),
    // the name verified (upstream.tls.server_name if set, else `host`; an IP address is
    // verified as one), the last session of `cache` offered, and new sessions kept in
    // `cache`, which must outlive the SSL's reads.
    ssl_ptr make_ssl(session_cache& cache, const std::string& host) const;

    bool verifies() const { return verify_; }
    SSL_CTX* native() const { return ctx_; }

private:
    SSL_CTX* ctx_;
    std::string name_;  // upstream.tls.server_name ("": each server's host)
    bool verify_ = true;
};

class session_cache {
public:
    session_cache() = default;
    ~session_cache();
    session_cache(const session_cache&) = delete;
    session_cache& operator=(const session_cache&) = delete;

    // The session to offer on a connection made with `ctx` (null: none yet, or only one of
    // another context). Not owned by the caller.
    SSL_SESSION* get(const client_context& ctx) const;
    // Keeps `s` (its reference is taken) as the one to offer next on connections of `ctx`.
    void keep(SSL_CTX* ctx, SSL_SESSION* s);

private:
    SSL_CTX* ctx_ = nullptr;  // referenced while held
    SSL_SESSION* session_ = nullptr;
};

// Why a handshake with `ssl` failed, for a log line: the certificate verification's reason
// when that is what failed, else `ec`'s message.
std::string handshake_failure(SSL* ssl, const error_code& ec);

}  // namespace sluice::tls
