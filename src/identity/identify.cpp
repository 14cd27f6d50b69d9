#include "identity/identify.hpp"

#include "base/text.hpp"

#include <boost/beast/core/string.hpp>

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

// A value given again: when it differs, the name is ambiguous (noted once).
void again(std::size_t index, std::string_view value, const std::string& first, std::vector<std::size_t>& ambiguous) {
    if (value != first && std::find(ambiguous.begin(), ambiguous.end(), index) == ambiguous.end())
        ambiguous.push_back(index);
}

// Empty values are none, and so are ambiguous ones.
void settle(std::vector<std::optional<std::string>>& values, const std::vector<std::size_t>& ambiguous) {
    for (auto& v : values)
        if (v && v->empty()) v.reset();
    for (const std::size_t i : ambiguous) values[i].reset();
}

// A field name as CGI-style servers (PHP, Django, Rack, WSGI) read it: case and '_' for '-'
// aside (X_Tenant is their HTTP_X_TENANT, as X-Tenant is).
bool same_field(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    const auto fold = [](char c) { return c == '_' ? '-' : base::ascii_lower(c); };
    for (std::size_t i = 0; i < a.size(); ++i)
        if (fold(a[i]) != fold(b[i])) return false;
    return true;
}

// header: kinds: each configured field's value, without its surrounding blanks; an empty or
// blank value is none, and so is a field given twice with different values (ambiguous). A
// name written with '_' for '-' is the same field (same_field).
void read_headers(const kind_names& names, const http::message_head& req, caller& out) {
    out.headers.assign(names.headers.size(), std::nullopt);
    out.ambiguous_headers.clear();
    for (const auto& f : req.fields()) {
        const std::string_view name = req.name(f);
        // Every configured name it is (X_A and X-A may both be configured).
        for (std::size_t index = 0; index < names.headers.size(); ++index) {
            if (!same_field(names.headers[index], name)) continue;
            auto& slot = out.headers[index];
            const std::string_view v = base::trim(req.value(f));
            if (slot)
                again(index, v, *slot, out.ambiguous_headers);
            else
                slot.emplace(v);
        }
    }
    settle(out.headers, out.ambiguous_headers);
}

// A query parameter's name or value as form decoders read it: '+' is a space and "%XX" the
// byte XX; a '%' not followed by two hex digits stays as written (as lenient servers keep
// it), so a bad escape changes the value instead of hiding it.
void form_decode(std::string_view s, std::string& out) {
    const auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        c = base::ascii_lower(c);
        return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    };
    out.clear();
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '+') {
            out += ' ';
        } else if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
            out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
            i += 2;
        } else {
            out += s[i];
        }
    }
}

// query: kinds: each configured parameter's value, form-decoded; a parameter without a value,
// or an empty one, is none, and so is one given twice with different values (ambiguous).
// Parameters are read one by one: a byte the URI grammar does not allow or a bad escape in
// one of them hides no other (the upstream, whose parser is likely as lenient, would still
// read it).
void read_query(const kind_names& names, std::string_view target, caller& out) {
    out.queries.assign(names.queries.size(), std::nullopt);
    out.ambiguous_queries.clear();
    const auto q = target.find('?');
    if (q == std::string_view::npos) return;
    std::string_view rest = target.substr(q + 1);  // no '#': route::parse_target refuses one
    std::string key, value;
    while (!rest.empty()) {
        const auto amp = rest.find('&');
        const std::string_view param = rest.substr(0, amp);
        rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
        const auto eq = param.find('=');  // none: no value, as an empty one
        form_decode(param.substr(0, eq), key);
        const auto it = std::lower_bound(names.queries.begin(), names.queries.end(), key);
        if (it == names.queries.end() || *it != key) continue;
        const auto index = static_cast<std::size_t>(it - names.queries.begin());
        auto& slot = out.queries[index];
        form_decode(eq == std::string_view::npos ? std::string_view() : param.substr(eq + 1), value);
        if (slot)
            again(index, value, *slot, out.ambiguous_queries);
        else
            slot.emplace(value);
    }
    settle(out.queries, out.ambiguous_queries);
}

// The user and the values of the other kinds, once the client address is known.
void identify_user(const clients& c, const http::message_head& req, bool wants_user, std::int64_t now_unix_seconds,
                   std::string_view certificate, result& r) {
    if (!wants_user || r.who.allow_listed) return;
    if (!c.names.headers.empty()) read_headers(c.names, req, r.who);
    if (!c.names.queries.empty()) read_query(c.names, req.target(), r.who);
    if (!c.users) return;
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
}

}  // namespace

result identify(const clients& c, const http::message_head& req, const address& peer, bool wants_user,
                std::int64_t now_unix_seconds, std::string_view certificate) {
    result r;
    identify_client(c, req, peer, r.who);
    identify_user(c, req, wants_user, now_unix_seconds, certificate, r);
    return r;
}

result identify_as(const clients& c, const http::message_head& req, const address& client, bool wants_user,
                   std::int64_t now_unix_seconds) {
    result r;
    r.who.client = normalize(client);
    r.who.allow_listed = c.allow.contains(r.who.client);
    identify_user(c, req, wants_user, now_unix_seconds, {}, r);
    return r;
}

}  // namespace sluice::identity
