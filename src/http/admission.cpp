#include "http/admission.hpp"

#include "limit/headers.hpp"

#include <boost/beast/core/string.hpp>

#include <chrono>

namespace sluice::http {

using boost::beast::iequals;
using forwarded_kind = config::clients_config::forwarded_kind;

namespace {

std::vector<std::string_view> forwarding_values(const message_head& req, forwarded_kind kind) {
    std::vector<std::string_view> values;
    const char* name = kind == forwarded_kind::forwarded ? "forwarded" : "x-forwarded-for";
    for (const auto& f : req.fields())
        if (iequals(req.name(f), name)) values.push_back(req.value(f));
    return values;
}

// A header's first value by name; nullopt when absent.
std::optional<std::string_view> field(const message_head& req, std::string_view name) {
    for (const auto& f : req.fields())
        if (iequals(req.name(f), name)) return req.value(f);
    return std::nullopt;
}

}  // namespace

bool admission::prepare(const snapshot& s, const limit::route& r, const message_head& req,
                        const boost::asio::ip::address& peer, const identity::hasher& h, outcome& out) {
    const auto& clients = s.cfg->clients;
    auto client = identity::normalize(peer);
    if (clients.forwarded_header != forwarded_kind::none && s.trusted.contains(client))
        client = identity::client_address(client, forwarding_values(req, clients.forwarded_header),
                                          clients.forwarded_header, s.trusted);
    if (s.allow.contains(client)) {
        out.decision = "bypass";
        return false;
    }

    const limit::policy& p = *r.limits;
    std::size_t n = 0;
    if (!p.ip.empty()) {
        // A connection's client rarely changes: hash it once, not per request.
        if (client != cached_client_ || &s != cached_for_) {
            cached_client_ = client;
            cached_for_ = &s;
            cached_ip_ = h.hash("ip", identity::ip_identifier(client, clients.ipv6_prefix));
        }
        keys_[n++] = {'i', cached_ip_, p.ip};
    }
    if (s.users) {
        auto key = s.users->api_key_header().empty() ? std::nullopt : field(req, s.users->api_key_header());
        auto jwt = s.users->jwt_header() ? field(req, *s.users->jwt_header()) : std::nullopt;
        auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
        auto user = s.users->resolve(key.value_or(""), jwt, now);
        if (user.status == identity::user_result::status::invalid) {
            out.what = outcome::kind::unauthorized;
            out.decision = "unauthorized";
            out.reason = std::move(user.reason);
            return false;
        }
        if (user.status == identity::user_result::status::ok && !p.user.empty()) {
            if (user.id != cached_user_) {
                cached_user_ = user.id;
                cached_user_hash_ = h.hash("user", user.id);
            }
            keys_[n++] = {'u', cached_user_hash_, p.user};
        }
    }
    request_ = {std::span(keys_.data(), n), r.cost};
    if (n > 0) {
        out.id_kind = keys_[n - 1].kind;  // the user when there is one
        out.id = keys_[n - 1].id;
    }
    return n > 0;
}

void admission::conclude(const snapshot& s, const limit::route& r, const limit::check_result& result,
                         metrics::shard& m, outcome& out) {
    const limit::policy& p = *r.limits;
    if (result.state == limit::check_result::status::error) {
        m.store_failed();
        out.decision = "store_error";
        if (s.cfg->store.on_error == config::store_config::failure_mode::deny) out.what = outcome::kind::store_down;
        return;
    }
    const auto& d = result.verdict;
    if (d.allowed) {
        m.decided(p.metric_slot, metrics::decision_result::allowed);
        out.decision = "allowed";
    } else if (p.shadow) {
        m.decided(p.metric_slot, metrics::decision_result::shadow_limited);
        out.decision = "shadow_limited";
    } else {
        m.decided(p.metric_slot, metrics::decision_result::limited);
        out.decision = "limited";
        out.what = outcome::kind::limited;
        out.retry_after_s = limit::retry_after_seconds(d);
    }
    // A shadow policy stays invisible to clients.
    if (!p.shadow) limit::append_rate_limit_fields(out.fields, d, s.cfg->response.headers);
}

}  // namespace sluice::http
