#include "store/redis_options.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace sluice::store {

namespace asio = boost::asio;
using boost::system::error_code;

std::shared_ptr<asio::ssl::context> make_tls_context(const config::redis_tls_config& c) {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    auto check = [](const error_code& ec, const char* key, const std::string& file) {
        if (ec)
            throw std::runtime_error("store.redis.tls." + std::string(key) + ": cannot load " + file + ": " +
                                     ec.message());
    };
    error_code ec;
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_compression, ec);
    ctx->set_verify_mode(asio::ssl::verify_peer, ec);
    ctx->load_verify_file(c.ca_file, ec);
    check(ec, "ca_file", c.ca_file);
    if (!c.cert_file.empty()) {
        ctx->use_certificate_chain_file(c.cert_file, ec);
        check(ec, "cert_file", c.cert_file);
        ctx->use_private_key_file(c.key_file, asio::ssl::context::pem, ec);  // also checks it matches
        check(ec, "key_file", c.key_file);
    }
    return ctx;
}

redis_connection_options redis_connection_options::from(const config::store_config& c, std::string script,
                                                        std::shared_ptr<asio::ssl::context> tls) {
    redis_connection_options o;
    if (!c.redis_nodes.empty()) {
        o.host = c.redis_nodes.front().host;
        o.port = c.redis_nodes.front().port;
    }
    if (c.redis_tls) {
        o.tls = tls ? std::move(tls) : make_tls_context(*c.redis_tls);
        o.tls_server_name = c.redis_tls->server_name;
    }
    if (c.redis_sentinel) {
        o.sentinel_master = c.redis_sentinel->master;
        o.sentinels = c.redis_sentinel->nodes;
    }
    o.username = c.redis_username;
    if (!c.redis_password_env.empty()) {
        if (const char* p = std::getenv(c.redis_password_env.c_str())) o.password = p;
    }
    o.database = c.redis_database;
    o.timeout = c.redis_timeout;
    o.script = std::move(script);
    return o;
}

redis_clock::duration redis_connection_options::stall_after() const {
    return std::max<redis_clock::duration>(3 * timeout, std::chrono::seconds(1));
}

std::vector<std::string> redis_connection_options::handshake_commands() const {
    std::vector<std::string> out;
    if (!password.empty()) {
        if (username.empty())
            out.push_back(format_command({"AUTH", password}));
        else
            out.push_back(format_command({"AUTH", username, password}));
    }
    if (database != 0) out.push_back(format_command({"SELECT", std::to_string(database)}));
    if (!script.empty()) out.push_back(format_command({"SCRIPT", "LOAD", script}));
    return out;
}

std::string redis_connection_options::reload_command() const {
    return script.empty() ? std::string() : format_command({"SCRIPT", "LOAD", script});
}

}  // namespace sluice::store
