// Header rewriting for both hops. Pure functions over message heads; no sockets.
//
// Order matters: first every hop-by-hop field is dropped (the names Connection lists,
// then Connection, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-*), and
// framing (Content-Length) is dropped too since Sluice rebuilds it. Only then are
// X-Forwarded-For/-Proto/-Host and Via added, so naming them in Connection strips nothing.
// X-Forwarded-For and Via are lists: every field received is joined, in order, before
// Sluice's own entry, as if they had come as one field.
#pragma once

#include "http/message.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::proxy {

enum class body_framing { none, length, chunked, until_close };

struct request_context {
    std::string_view client_ip;           // peer address as text
    std::string_view upstream_authority;  // Host when the client sent none
    std::string_view base_path;           // prefix for the target, "" for none
    bool upgrade = false;                 // forward Upgrade + Connection: upgrade
    std::string_view target{};            // origin-form target to send; "" = as received
    std::string_view host{};              // replaces the Host field ("" = keep the client's)
    bool peer_trusted = false;            // a trusted proxy: its X-Forwarded-Proto/-Host stand
    bool tls = false;                     // the client came over TLS: X-Forwarded-Proto https
};

// Tokens of every Connection field, compared case-insensitively.
class connection_tokens {
public:
    explicit connection_tokens(const http::message_head& head);
    bool has(std::string_view token) const;
    bool names(std::string_view field_name) const { return has(field_name); }

private:
    std::string_view values_[8];
    std::size_t n_ = 0;
};

bool is_hop_by_hop(const http::message_head& head, const http::header_field& f, const connection_tokens& tokens);

// Appends the request line and header block sent upstream (ending in the blank line).
void write_request_head(std::string& out, const http::message_head& req, const request_context& ctx,
                        body_framing framing, std::uint64_t length);

struct response_context {
    bool head_request = false;  // keep the upstream's Content-Length, send no body
    bool keep_alive = true;     // false: Connection: close
    bool client_http10 = false;
    bool upgrade = false;      // a 101 being relayed
    std::string_view extra{};  // complete field lines added by Sluice (rate-limit fields)
    std::string_view drop{};   // a field name not relayed, compared case-insensitively (a route's cost_header)
};

// Appends the status line and header block sent to the client.
void write_response_head(std::string& out, const http::message_head& resp, const response_context& ctx,
                         body_framing framing, std::uint64_t length);

// Whether a request with this method may be sent again after a connection failure.
bool is_idempotent(boost::beast::http::verb v);

}  // namespace sluice::proxy
