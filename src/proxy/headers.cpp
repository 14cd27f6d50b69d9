#include "proxy/headers.hpp"

#include "base/text.hpp"

#include <boost/beast/core/string.hpp>

#include "http/response.hpp"

namespace sluice::proxy {

using boost::beast::iequals;
using http::append_number;
using field = boost::beast::http::field;
using boost::beast::http::verb;

namespace {

using base::trim;

void append_field(std::string& out, std::string_view name, std::string_view value) {
    out.append(name);
    out.append(": ");
    out.append(value);
    out.append("\r\n");
}

bool is_proxy_prefixed(std::string_view name) { return name.size() > 6 && iequals(name.substr(0, 6), "proxy-"); }

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

connection_tokens::connection_tokens(const http::message_head& head) {
    for (const auto& f : head.fields())
        if (f.name == field::connection && n_ < std::size(values_)) values_[n_++] = head.value(f);
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

bool is_hop_by_hop(const http::message_head& head, const http::header_field& f, const connection_tokens& tokens) {
    switch (f.name) {
        case field::connection:
        case field::keep_alive:
        case field::te:
        case field::trailer:
        case field::transfer_encoding:
        case field::upgrade:
        case field::proxy_connection:
        case field::proxy_authenticate:
        case field::proxy_authorization: return true;
        default: break;
    }
    if (f.name == field::host) return false;  // routing used it: `Connection: host` cannot drop it
    auto name = head.name(f);
    return is_proxy_prefixed(name) || tokens.names(name);
}

namespace {

bool is_named(const http::message_head& m, const http::header_field& f, std::string_view name) {
    return f.name == field::unknown && iequals(m.name(f), name);
}

// Appends "Name: v1, v2, ..., last\r\n": every end-to-end field the predicate picks, in
// order, as one list (a proxy before us may have added its own field rather than extended
// the first).
template <class Pick>
void append_list(std::string& out, const http::message_head& m, const connection_tokens& tokens, std::string_view name,
                 Pick&& pick, std::string_view last) {
    out.append(name);
    out.append(": ");
    for (const auto& f : m.fields()) {
        if (!pick(f) || is_hop_by_hop(m, f, tokens)) continue;
        out.append(m.value(f));
        out.append(", ");
    }
    out.append(last);
    out.append("\r\n");
}

}  // namespace

void write_request_head(std::string& out, const http::message_head& req, const request_context& ctx,
                        body_framing framing, std::uint64_t length) {
    out.append(req.method_text());
    out.push_back(' ');
    auto target = ctx.target.empty() ? req.target() : ctx.target;
    if (!ctx.base_path.empty()) {
        out.append(ctx.base_path);
        if (target.empty() || target.front() != '/') out.push_back('/');
    }
    out.append(target);
    out.append(" HTTP/1.1\r\n");

    connection_tokens tokens(req);
    std::string_view host = ctx.host, upgrade, proto, fwd_host;
    for (const auto& f : req.fields()) {
        if (f.name == field::upgrade) upgrade = req.value(f);
        if (is_hop_by_hop(req, f, tokens)) continue;
        switch (f.name) {
            case field::content_length:
            case field::expect:  // answered by Sluice itself
            case field::via:     // joined below
                continue;
            case field::host:
                if (!ctx.host.empty()) continue;  // absolute-form: the target names the host
                if (host.empty()) host = req.value(f);
                break;
            case field::unknown: {
                // Beast has no enumerators for the X-Forwarded-* names.
                auto name = req.name(f);
                if (iequals(name, "x-forwarded-for")) continue;  // joined below
                if (iequals(name, "x-forwarded-proto")) {
                    if (proto.empty()) proto = trim(req.value(f));
                    continue;
                }
                if (iequals(name, "x-forwarded-host")) {
                    if (fwd_host.empty()) fwd_host = trim(req.value(f));
                    continue;
                }
                break;
            }
            default: break;
        }
        append_field(out, req.name(f), req.value(f));
    }
    if (!ctx.host.empty()) append_field(out, "Host", ctx.host);
    if (host.empty()) append_field(out, "Host", ctx.upstream_authority);
    append_list(
        out, req, tokens, "X-Forwarded-For",
        [&](const http::header_field& f) { return is_named(req, f, "x-forwarded-for"); }, ctx.client_ip);
    // What a trusted proxy says of the original request stands; anyone else's is replaced.
    if (!ctx.peer_trusted || (proto != "http" && proto != "https")) proto = ctx.tls ? "https" : "http";
    append_field(out, "X-Forwarded-Proto", proto);
    if (!ctx.peer_trusted || fwd_host.empty()) fwd_host = host;
    if (!fwd_host.empty()) append_field(out, "X-Forwarded-Host", fwd_host);
    append_list(
        out, req, tokens, "Via", [](const http::header_field& f) { return f.name == field::via; },
        req.version == 10 ? "1.0 sluice" : "1.1 sluice");
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
    std::string_view upgrade;
    const bool keep_length = ctx.head_request || resp.status == 304;
    bool dated = false;
    for (const auto& f : resp.fields()) {
        if (f.name == field::upgrade) upgrade = resp.value(f);
        dated = dated || f.name == field::date;
        if (is_hop_by_hop(resp, f, tokens)) continue;
        if (f.name == field::content_length && !keep_length) continue;
        if (f.name == field::via) continue;  // joined below
        if (!ctx.drop.empty() && boost::beast::iequals(resp.name(f), ctx.drop)) continue;
        append_field(out, resp.name(f), resp.value(f));
    }
    append_list(
        out, resp, tokens, "Via", [](const http::header_field& f) { return f.name == field::via; },
        resp.version == 10 ? "1.0 sluice" : "1.1 sluice");
    out.append(ctx.extra);
    if (ctx.upgrade) {
        append_field(out, "Upgrade", upgrade);
        out.append("Connection: upgrade\r\n");
    } else if (!ctx.keep_alive) {
        out.append("Connection: close\r\n");
    } else if (ctx.client_http10) {
        out.append("Connection: keep-alive\r\n");
    }
    // A recipient with a clock adds the Date an origin left out (RFC 9110 section 6.6.1).
    if (resp.status >= 200 && !dated) http::append_date(out);
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
        case verb::delete_: return true;
        default: return false;
    }
}

}  // namespace sluice::proxy
