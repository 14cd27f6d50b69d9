// What the TLS contexts share about OpenSSL: its error queue, and keys never prompted for.
#pragma once

#include <openssl/err.h>

#include <string>

namespace sluice::tls::detail {

// OpenSSL's reason for the last failure ("no certificate or crl found"); the queue is cleared.
inline std::string openssl_reason() {
    const unsigned long e = ERR_peek_last_error();
    ERR_clear_error();
    const char* r = ERR_reason_error_string(e);
    return r ? r : "unknown OpenSSL error";
}

// An encrypted key is refused, never prompted for on a terminal.
inline int no_passphrase(char*, int, int, void*) { return -1; }

}  // namespace sluice::tls::detail
