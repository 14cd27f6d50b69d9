// The small sections: server, admin, proxy, log, response.
#include <algorithm>
#include <filesystem>
#include <limits>

#include "config/readers.hpp"
#include "config/stable_file.hpp"

namespace sluice::config::detail {

namespace {

proxy_protocol_config read_proxy_protocol(const node_ref& n) {
    proxy_protocol_config out;
    read_mapping(
        n, {
               {"trusted",
                [&](const node_ref& v) {
                    read_list(v, empty_list::refused,
                              [&](const node_ref& item) { out.trusted.push_back(read_cidr(item)); });
                },
                presence::required},
               {"header_timeout", [&](const node_ref& v) { out.header_timeout = read_duration(v, zero::refused); }},
           });
    return out;
}

// server.listen (an address, or off) is taken at start only.
bool keep_plain_listener(config& next, const config& running) {
    const bool changed = next.server.plain != running.server.plain ||
                         (running.server.plain && next.server.listen != running.server.listen);
    next.server.plain = running.server.plain;
    next.server.listen = running.server.listen;
    return changed;
}

// admin.token_file's token: the file's content, trimmed of blanks and line ends. A path
// relative to the config file's directory.
std::string read_admin_token(const node_ref& v, const std::string& file) {
    std::filesystem::path path(file);
    if (path.is_relative()) path = std::filesystem::path(v.source()).parent_path() / path;
    std::string text;
    try {
        text = read_stable_file(path.string());
    } catch (const std::exception& e) {
        v.fail(e.what());
    }
    std::string_view token = text;
    const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!token.empty() && blank(token.front())) token.remove_prefix(1);
    while (!token.empty() && blank(token.back())) token.remove_suffix(1);
    if (!is_bearer_token(token)) v.fail(bad_admin_token);
    return std::string(token);
}

}  // namespace

void read_server(const node_ref& n, server_config& out) {
    std::optional<node_ref> plain_at;
    read_mapping(
        n, {
               {"listen",
                [&](const node_ref& v) {
                    out.plain = !v.node().IsScalar() || v.node().Scalar() != "off";
                    if (out.plain) out.listen = read_address(v);
                    plain_at = v;
                },
                presence::optional, keep_plain_listener},
               {"threads", [&](const node_ref& v) { out.threads = schema::read_uint_as(v, 0u, 1024u); },
                presence::optional, restart_only<&config::server, &server_config::threads>},
               {"max_connections",
                [&](const node_ref& v) { out.max_connections = schema::read_uint_as<std::size_t>(v, 1, 10'000'000); },
                presence::optional, restart_only<&config::server, &server_config::max_connections>},
               {"header_timeout", [&](const node_ref& v) { out.header_timeout = read_duration(v, zero::refused); }},
               {"idle_timeout", [&](const node_ref& v) { out.idle_timeout = read_duration(v, zero::refused); }},
               {"drain_timeout", [&](const node_ref& v) { out.drain_timeout = read_duration(v, zero::allowed); }},
               {"body_timeout", [&](const node_ref& v) { out.body_timeout = read_duration(v, zero::refused); }},
               {"body_min_rate", [&](const node_ref& v) { out.body_min_rate = read_size(v, 0, 1ull << 40); }},
               {"max_header_bytes", [&](const node_ref& v) { out.max_header_bytes = read_size(v, 1024, 1 << 20); }},
               {"max_body_bytes",
                [&](const node_ref& v) {
                    out.max_body_bytes = read_size(v, 0, std::numeric_limits<std::uint64_t>::max());
                }},
               {"proxy_protocol", [&](const node_ref& v) { out.proxy_protocol = read_proxy_protocol(v); }},
               {"tls", [&](const node_ref& v) { out.tls = read_tls(v); }},
           });
    // Without a header_timeout of its own, the PROXY header has the request head's.
    if (out.proxy_protocol && out.proxy_protocol->header_timeout == duration{})
        out.proxy_protocol->header_timeout = out.header_timeout;
    if (!out.plain && !out.tls && plain_at)
        plain_at->fail("off needs server.tls: without a TLS listener the proxy would have no listener");
}

void read_admin(const node_ref& n, admin_config& out) {
    std::optional<node_ref> listen_at;
    read_mapping(
        n,
        {
            {"listen",
             [&](const node_ref& v) {
                 out.listen = read_address(v);
                 listen_at = v;
             },
             presence::optional, restart_only<&config::admin, &admin_config::listen>},
            {"token_file",
             [&](const node_ref& v) {
                 out.token_file = read_string(v);
                 out.token = read_admin_token(v, out.token_file);
             }},
            {"open",
             [&](const node_ref& v) {
                 out.open.clear();
                 read_list(v, empty_list::allowed, [&](const node_ref& item) {
                     auto path = schema::read_choice(item, {"/healthz", "/readyz", "/metrics", "/top", "/upstreams"});
                     if (std::find(out.open.begin(), out.open.end(), path) != out.open.end()) item.fail(listed_twice);
                     out.open.push_back(std::move(path));
                 });
             }},
        });
    // Without a token anyone who reaches the listener may reset counters, block callers and
    // reload: only the host itself may reach it.
    if (out.token_file.empty() && !is_loopback(out.listen.host) && listen_at) listen_at->fail(admin_needs_token);
}

void read_proxy(const node_ref& n, proxy_config& out) {
    read_mapping(n, {
                        {"request_buffering", [&](const node_ref& v) { out.request_buffering = schema::read_bool(v); }},
                        {"request_buffer_bytes",
                         [&](const node_ref& v) { out.request_buffer_bytes = read_size(v, 0, 64 << 20); }},
                    });
}

void read_log(const node_ref& n, log_config& out) {
    read_mapping(n, {
                        {"level",
                         [&](const node_ref& v) {
                             out.level = schema::read_choice(v, {"trace", "debug", "info", "warn", "error", "off"});
                         }},
                        {"access",
                         [&](const node_ref& a) {
                             read_mapping(
                                 a, {
                                        // A file path, "-" for stdout or "off".
                                        {"path",
                                         [&](const node_ref& v) {
                                             out.access_path = read_string(v);
                                             if (out.access_path.empty())
                                                 v.fail("must not be empty: use a file path, \"-\" or off");
                                         },
                                         presence::optional, restart_only<&config::log, &log_config::access_path>},
                                    });
                         }},
                    });
}

void read_response(const node_ref& n, response_config& out) {
    using header_style = response_config::header_style;
    read_mapping(n, {
                        {"headers",
                         [&](const node_ref& v) {
                             out.headers = read_enum<header_style>(v, {"ietf", "legacy", "both", "none"});
                         }},
                    });
}

}  // namespace sluice::config::detail
