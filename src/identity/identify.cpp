#include "identity/identify.hpp"

#include <boost/beast/core/string.hpp>

#include <optional>
#include <string_view>
#include <vector>

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

// The client address (peer and proxies' addresses as clients.trusted says).
void identify_client(const clients& c, const http::message_head& req, const address& peer, caller& out) {
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
}

}  // namespace

result identify(const clients& c, const http::message_head& req, const address& peer, bool wants_user,
                std::int64_t now_unix_seconds, std::string_view certificate) {
    result r;
    identify_client(c, req, peer, r.who);
    if (!wants_user || r.who.allow_listed || !c.users) return r;
    const user_resolver& users = *c.users;
    auto key = users.api_key_header().empty() ? std::nullopt : field(req, users.api_key_header());
    auto jwt = users.jwt_header() ? field(req, *users.jwt_header()) : std::nullopt;
    auto user = users.resolve(key.value_or(""), jwt, now_unix_seconds, certificate);
    switch (user.status) {
        case user_result::status::none: break;
        case user_result::status::invalid:
            r.refused = true;
            r.reason = std::move(user.reason);
            break;
        case user_result::status::ok:
            r.who.user = std::move(user.id);
            if (user.plan.empty())
                r.who.plan = c.cfg.default_plan;
            else
                r.who.plan = std::move(user.plan);
            break;
    }
    return r;
}

}  // namespace sluice::identity
