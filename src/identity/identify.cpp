#include "identity/identify.hpp"

#include "base/text.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/url/params_view.hpp>
#include <boost/url/parse_query.hpp>

#include <algorithm>
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

// header: kinds: each configured field's first occurrence, without its surrounding blanks;
// an empty or blank value is none.
void read_headers(const kind_names& names, const http::message_head& req, caller& out) {
    out.headers.assign(names.headers.size(), std::nullopt);
    for (const auto& f : req.fields()) {
        const std::string_view name = req.name(f);
        const auto it = std::find_if(names.headers.begin(), names.headers.end(),
                                     [&](const std::string& n) { return base::iequals(n, name); });
        if (it == names.headers.end()) continue;
        auto& slot = out.headers[static_cast<std::size_t>(it - names.headers.begin())];
        if (slot) continue;  // the first occurrence counts
        const std::string_view v = base::trim(req.value(f));
        slot.emplace(v);
    }
    for (auto& v : out.headers)
        if (v && v->empty()) v.reset();
}

// query: kinds: each configured parameter's first occurrence, percent-decoded ('+' as a
// space, as forms write it); a parameter without a value, or an empty one, is none. A query
// that does not parse gives none.
void read_query(const kind_names& names, std::string_view target, caller& out) {
    out.queries.assign(names.queries.size(), std::nullopt);
    const auto q = target.find('?');
    if (q == std::string_view::npos) return;
    std::string_view rest = target.substr(q + 1);
    // A string of its own: Boost 1.81's parse_query() reads its argument as a C string (up
    // to a NUL), past the end of a view into the head.
    const std::string query(rest.substr(0, rest.find('#')));
    if (!boost::urls::parse_query(query)) return;
    boost::urls::encoding_opts plus_is_space;
    plus_is_space.space_as_plus = true;
    for (const auto& param : boost::urls::params_view(query, plus_is_space)) {
        const auto it = std::lower_bound(names.queries.begin(), names.queries.end(), param.key);
        if (it == names.queries.end() || *it != param.key) continue;
        auto& slot = out.queries[static_cast<std::size_t>(it - names.queries.begin())];
        if (!slot) slot.emplace(param.value);
    }
    for (auto& v : out.queries)
        if (v && v->empty()) v.reset();
}

}  // namespace

result identify(const clients& c, const http::message_head& req, const address& peer, bool wants_user,
                std::int64_t now_unix_seconds, std::string_view certificate) {
    result r;
    identify_client(c, req, peer, r.who);
    if (!wants_user || r.who.allow_listed) return r;
    if (!c.names.headers.empty()) read_headers(c.names, req, r.who);
    if (!c.names.queries.empty()) read_query(c.names, req.target(), r.who);
    if (!c.users) return r;
    const user_resolver& users = *c.users;
    auto key = users.api_key_header().empty() ? std::nullopt : field(req, users.api_key_header());
    auto jwt = users.jwt_header() ? field(req, *users.jwt_header()) : std::nullopt;
    auto user = users.resolve(key.value_or(""), jwt, now_unix_seconds, certificate, c.names.claims);
    switch (user.status) {
        case user_result::status::none: break;
        case user_result::status::invalid:
            r.refused = true;
            r.reason = std::move(user.reason);
            break;
        case user_result::status::ok:
            r.who.user = std::move(user.id);
            r.who.claims = std::move(user.claims);
            if (user.plan.empty())
                r.who.plan = c.cfg.default_plan;
            else
                r.who.plan = std::move(user.plan);
            break;
    }
    return r;
}

}  // namespace sluice::identity
