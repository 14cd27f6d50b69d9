#include "limit/admission.hpp"

#include "limit/rate_limit_fields.hpp"

#include <algorithm>
#include <chrono>

namespace sluice::limit {

const char* to_string(decision_kind d) {
    switch (d) {
        case decision_kind::none: return "none";
        case decision_kind::bypass: return "bypass";
        case decision_kind::allowed: return "allowed";
        case decision_kind::limited: return "limited";
        case decision_kind::shadow_limited: return "shadow_limited";
        case decision_kind::unauthorized: return "unauthorized";
        case decision_kind::forbidden: return "forbidden";
        case decision_kind::store_error: return "store_error";
    }
    return "";
}

bool admission::prepare(const admission_context& ctx, const policy& p, std::int64_t cost, const identity::caller& who,
                        outcome& out) {
    if (who.allow_listed) {
        out.decision = decision_kind::bypass;
        return false;
    }
    // A connection's client and user rarely change: hash them once, not per request (and
    // again when a new config may have changed the hasher or the IPv6 prefix).
    if (ctx.generation != cached_for_) {
        cached_for_ = ctx.generation;
        ip_cached_ = user_cached_ = false;
    }
    std::size_t n = 0;
    if (!p.ip.empty()) {
        if (!ip_cached_ || who.client != cached_client_) {
            ip_cached_ = true;
            cached_client_ = who.client;
            cached_ip_ =
                ctx.hasher.hash(to_string(identity::kind::ip), identity::ip_identifier(who.client, ctx.ipv6_prefix));
        }
        kinds_[n] = identity::kind::ip;
        keys_[n++] = {identity::kind::ip, cached_ip_, p.ip};
    }
    if (!who.user.empty()) {
        std::span<const tier> tiers = p.user;
        if (p.user_by_plan) {
            const auto* plan_tiers = p.plan_user(who.plan);
            if (plan_tiers != nullptr) {
                tiers = *plan_tiers;
            } else if (p.shadow) {
                tiers = {};  // a shadow policy refuses no one: the address tiers alone are evaluated
            } else {
                out.what = outcome::kind::forbidden;
                out.decision = decision_kind::forbidden;
                out.reason = who.plan.empty()
                                 ? "no plan: the caller names none and clients.user.default_plan is not set"
                                 : "unknown plan";
                return false;
            }
        }
        if (!tiers.empty()) {
            if (!user_cached_ || who.user != cached_user_) {
                user_cached_ = true;
                cached_user_ = who.user;
                cached_user_hash_ = ctx.hasher.hash(to_string(identity::kind::user), who.user);
            }
            kinds_[n] = identity::kind::user;
            keys_[n++] = {identity::kind::user, cached_user_hash_, tiers};
        }
    }
    request_ = {std::span(keys_.data(), n), cost, p.count_rejected, 0};
    // Only a request that meets a concurrency tier draws a lease (a policy's may be in a
    // tier list this caller does not get, as a plan's).
    if (ctx.leases && p.concurrent) {
        const auto slot = [](const tier& t) { return t.algo == config::algorithm::concurrency; };
        for (std::size_t i = 0; i < n && request_.lease == 0; ++i)
            if (std::any_of(keys_[i].tiers.begin(), keys_[i].tiers.end(), slot)) request_.lease = ctx.leases->next();
    }
    if (n > 0) {
        out.id_kind = kinds_[n - 1];  // the user when there is one
        out.id = keys_[n - 1].id;
    }
    return n > 0;
}

void admission::conclude(const admission_context& ctx, const policy& p, const check_result& result, metrics::shard& m,
                         outcome& out) {
    if (result.state == check_result::status::error) {
        m.store_failed();
        out.decision = decision_kind::store_error;
        // local: the fallback store decides instead of failing; an error still here fails open.
        if (ctx.on_error == config::store_config::failure_mode::deny) out.what = outcome::kind::store_down;
        return;
    }
    const auto& d = result.verdict;
    if (d.allowed) {
        m.decided(p.metric_slot, metrics::decision_result::allowed);
        out.decision = decision_kind::allowed;
    } else if (p.shadow) {
        m.decided(p.metric_slot, metrics::decision_result::shadow_limited);
        out.decision = decision_kind::shadow_limited;
    } else {
        m.decided(p.metric_slot, metrics::decision_result::limited);
        out.decision = decision_kind::limited;
        out.what = outcome::kind::limited;
        out.retry_after_s = retry_after_seconds(d);
        if (ctx.refusals) record_refusal(ctx, p, d);
    }
    // A shadow policy stays invisible to clients.
    if (!p.shadow) append_rate_limit_fields(out.fields, d, ctx.headers);
}

// The identifier whose tier refused (the user when both did), named as the operator knows
// it: the address (IPv6 as limited, to its prefix) or the user. An API key is a
// credential: only the last four characters of one of 16 or more are shown.
void admission::record_refusal(const admission_context& ctx, const policy& p, const decision& d) {
    std::size_t refusing = request_.keys.size();
    for (const tier_result& t : d.tiers) {
        if (!t.admitted && (refusing == request_.keys.size() || t.key_index > refusing)) refusing = t.key_index;
    }
    if (refusing >= request_.keys.size()) return;
    const store_key& k = request_.keys[refusing];
    std::string label;
    if (kinds_[refusing] == identity::kind::ip) {
        label = identity::ip_identifier(cached_client_, ctx.ipv6_prefix);
    } else if (std::string_view user = cached_user_; user.starts_with("key:")) {
        label = user.size() >= 4 + 16 ? "key:…" + std::string(user.substr(user.size() - 4)) : "key:…";
    } else {
        label = cached_user_;
    }
    const auto now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
    ctx.refusals->refused(now.count(), p.metric_slot, p.name, kinds_[refusing], k.id, label);
}

}  // namespace sluice::limit
