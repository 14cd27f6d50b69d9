// What one Redis connection is configured with: where it goes, its credentials, timeouts,
// the in-flight cap, TLS and Sentinel; and the client TLS context of store.redis.tls.
//
// Thread: plain values; make_tls_context() at start-up or reload (it reads files).
#pragma once

#include "config/config.hpp"
#include "store/redis_pipeline.hpp"

#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::store {

struct redis_connection_options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 6379;
    std::string username;  // "" = default user
    std::string password;  // "" = no AUTH
    unsigned database = 0;
    redis_clock::duration timeout = std::chrono::milliseconds(50);    // per call
    redis_clock::duration connect_timeout = std::chrono::seconds(1);  // TCP connect, then handshake
    std::size_t max_in_flight = 1024;
    redis_clock::duration backoff_first = std::chrono::milliseconds(50);
    redis_clock::duration backoff_max = std::chrono::seconds(1);  // docs/redis.md promises a second
    std::string script;                              // loaded on every connect and after NOSCRIPT; "" = none
    std::shared_ptr<boost::asio::ssl::context> tls;  // null = plain TCP; shared, only read
    std::string tls_server_name;                     // "" = the host connected to
    std::string sentinel_master;
    std::vector<config::host_port> sentinels;  // non-empty: the primary comes from them

    // From store.redis.*: the first node, the password read from the environment variable
    // named by password_env (unset or empty: no AUTH), TLS and Sentinel. With store.redis.tls
    // and no `tls` given, the context is built here (make_tls_context, which may throw).
    static redis_connection_options from(const config::store_config& c, std::string script,
                                         std::shared_ptr<boost::asio::ssl::context> tls = nullptr);
    // How long the oldest outstanding command may wait before the connection is rebuilt.
    redis_clock::duration stall_after() const;
    // The handshake sent on every connect, in RESP: AUTH (if a password is set), SELECT (if
    // database != 0), SCRIPT LOAD of the script (if not empty).
    std::vector<std::string> handshake_commands() const;
    // SCRIPT LOAD of the script in RESP ("" without a script): sent again after NOSCRIPT.
    std::string reload_command() const;
};

// The client TLS context of store.redis.tls: peer verification against ca_file, the client
// certificate if given. Throws std::runtime_error naming the file that did not load.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const config::redis_tls_config& c);

}  // namespace sluice::store
