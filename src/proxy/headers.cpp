#include "proxy/headers.hpp"

#include <boost/beast/core/string.hpp>

#include <charconv>

namespace sluice::proxy {

using boost::beast::iequals;
using bhttp = boost::beast::http::field;
using boost::beast::http::verb;

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

void append_number(std::string& out, std::uint64_t n) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, n);
    out.append(buf, r.ptr);
}

void append_field(std::string& out, std::string_view name, std::string_view value) {
    out.append(name);
    out.append(": ");
    out.append(value);
    out.append("\r\n");
}

bool is_proxy_prefixed(std::string_view name) {
    return name.size() > 6 && iequals(name.substr(0, 6), "proxy-");
}

void append_framing(std::string& out, body_framing framing, std::uint64_t length) {
    if (framing == body_framing::length) {
        out.append("Content-Length: ");
        append_number(out, length);
        out.append("\r\n");
    } else if (framing == body_framing::chunked) {
        out.append("Transfer-Encoding: chunked\r\n");
    }
}

}  // namespace

connection_tokens::connection_tokens(const http::message_head& head) : head_(head) {
    for (const auto& f : head.fields())
        if (f.name == bhttp::connection && n_ < std::size(values_)) values_[n_++] = head.value(f);
}

bool connection_tokens::has(std::string_view token) const {
    for (std::size_t i = 0; i < n_; ++i) {
        std::string_view rest = values_[i];
        while (!rest.empty()) {
            auto comma = rest.find(',');
            auto item = trim(rest.substr(0, comma));
            if (iequals(item, token)) return true;
            if (comma == std::string_view::npos) break;
            rest.remove_prefix(comma + 1);
        }
    }
    return false;
}

bool is_hop_by_hop(const http::message_head& head, const http::header_field& f,
                   const connection_tokens& tokens) {
    switch (f.name) {
        case bhttp::connection:
        case bhttp::keep_alive:
        case bhttp::te:
        case bhttp::trailer:
        case bhttp::transfer_encoding:
        case bhttp::upgrade:
        case bhttp::proxy_connection:
        case bhttp::proxy_authenticate:
        case bhttp::proxy_authorization:
            return true;
        default:
            break;
    }
    auto name = head.name(f);
    return is_proxy_prefixed(name) || tokens.names(name);
}

void write_request_head(std::string& out, const http::message_head& req, const request_context& ctx,
                        body_framing framing, std::uint64_t length) {
    out.append(req.method_text());
    out.push_back(' ');
    auto target = req.target();
    if (!ctx.base_path.empty()) {
        out.append(ctx.base_path);
        if (target.empty() || target.front() != '/') out.push_back('/');
    }
    out.append(target);
    out.append(" HTTP/1.1\r\n");

    connection_tokens tokens(req);
    std::string_view xff, via, host, upgrade;
    for (const auto& f : req.fields()) {
        if (f.name == bhttp::upgrade) upgrade = req.value(f);
        if (is_hop_by_hop(req, f, tokens)) continue;
        switch (f.name) {
            case bhttp::content_length:
            case bhttp::expect:  // answered by Sluice itself
                continue;
            case bhttp::via:
                if (via.empty()) via = req.value(f);
                continue;
            case bhttp::host:
                if (host.empty()) host = req.value(f);
                break;
            case bhttp::unknown: {
                // Beast has no enumerators for the X-Forwarded-* names.
                auto name = req.name(f);
                if (iequals(name, "x-forwarded-for")) {
                    if (xff.empty()) xff = req.value(f);  // several fields: keep the first list
                    continue;
                }
                if (iequals(name, "x-forwarded-proto") || iequals(name, "x-forwarded-host")) continue;
                break;
            }
            default:
                break;
        }
        append_field(out, req.name(f), req.value(f));
    }
    if (host.empty()) append_field(out, "Host", ctx.upstream_authority);
    out.append("X-Forwarded-For: ");
    if (!xff.empty()) {
        out.append(xff);
        out.append(", ");
    }
    out.append(ctx.client_ip);
    out.append("\r\nX-Forwarded-Proto: http\r\n");
    if (!host.empty()) append_field(out, "X-Forwarded-Host", host);
    out.append("Via: ");
    if (!via.empty()) {
        out.append(via);
        out.append(", ");
    }
    out.append(req.version == 10 ? "1.0 sluice\r\n" : "1.1 sluice\r\n");
    if (ctx.upgrade && !upgrade.empty()) {
        append_field(out, "Upgrade", upgrade);
        out.append("Connection: upgrade\r\n");
    }
    append_framing(out, framing, length);
    out.append("\r\n");
}

void write_response_head(std::string& out, const http::message_head& resp, const response_context& ctx,
                         body_framing framing, std::uint64_t length) {
    out.append("HTTP/1.1 ");
    append_number(out, resp.status);
    out.push_back(' ');
    out.append(resp.reason());
    out.append("\r\n");

    connection_tokens tokens(resp);
    std::string_view via, upgrade;
    const bool keep_length = ctx.head_request || resp.status == 304;
    for (const auto& f : resp.fields()) {
        if (f.name == bhttp::upgrade) upgrade = resp.value(f);
        if (is_hop_by_hop(resp, f, tokens)) continue;
        if (f.name == bhttp::content_length && !keep_length) continue;
        if (f.name == bhttp::via) {
            if (via.empty()) via = resp.value(f);
            continue;
        }
        append_field(out, resp.name(f), resp.value(f));
    }
    out.append("Via: ");
    if (!via.empty()) {
        out.append(via);
        out.append(", ");
    }
    out.append(resp.version == 10 ? "1.0 sluice\r\n" : "1.1 sluice\r\n");
    out.append(ctx.extra);
    if (ctx.upgrade) {
        append_field(out, "Upgrade", upgrade);
        out.append("Connection: upgrade\r\n");
    } else if (!ctx.keep_alive) {
        out.append("Connection: close\r\n");
    } else if (ctx.client_http10) {
        out.append("Connection: keep-alive\r\n");
    }
    if (!keep_length) append_framing(out, framing, length);
    out.append("\r\n");
}

bool is_idempotent(verb v) {
    switch (v) {
        case verb::get:
        case verb::head:
        case verb::options:
        case verb::trace:
        case verb::put:
        case verb::delete_:
            return true;
        default:
            return false;
    }
}

}  // namespace sluice::proxy
