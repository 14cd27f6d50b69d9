#include "identity/caller.hpp"

#include <boost/beast/core/string.hpp>

namespace sluice::identity {

using boost::beast::iequals;
using forwarded_kind = config::clients_config::forwarded_kind;

namespace {

// A header's first value by name; nullopt when absent.
std::optional<std::string_view> field(const http::message_head& req, std::string_view name) {
    for (const auto& f : req.fields())
        if (iequals(req.name(f), name)) return req.value(f);
    return std::nullopt;
}

}  // namespace

clients::clients(const config::clients_config& c) : cfg(c), trusted(c.trusted_proxies), allow(c.allow) {
    if (!c.api_key_header.empty() || c.jwt) users.emplace(c);
}

caller identify_client(const clients& c, const http::message_head& req, const address& peer) {
    caller out;
    out.client = normalize(peer);
    out.peer_trusted = c.trusted.contains(out.client);
    if (c.cfg.forwarded_header != forwarded_kind::none && out.peer_trusted) {
        std::vector<std::string_view> values;
        const char* name = c.cfg.forwarded_header == forwarded_kind::forwarded ? "forwarded" : "x-forwarded-for";
        for (const auto& f : req.fields())
            if (iequals(req.name(f), name)) values.push_back(req.value(f));
        out.client = client_address(out.client, values, c.cfg.forwarded_header, c.trusted);
    }
    out.allow_listed = c.allow.contains(out.client);
    return out;
}

user_result identify_user(const user_resolver& users, const http::message_head& req, std::int64_t now_unix_seconds) {
    auto key = users.api_key_header().empty() ? std::nullopt : field(req, users.api_key_header());
    auto jwt = users.jwt_header() ? field(req, *users.jwt_header()) : std::nullopt;
    return users.resolve(key.value_or(""), jwt, now_unix_seconds);
}

}  // namespace sluice::identity
