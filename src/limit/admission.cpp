#include "limit/admission.hpp"

#include "limit/rate_limit_fields.hpp"

#include "identity/kind_spec.hpp"

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
        case decision_kind::missing: return "missing";
        case decision_kind::ambiguous: return "ambiguous";
        case decision_kind::blocked: return "blocked";
    }
    return "";
}

void append_user_label(std::string& out, std::string_view user) {
    if (!user.starts_with("key:")) {
        out.append(user);
        return;
    }
    out += "key:…";
    if (user.size() >= 4 + 16) out.append(user.substr(user.size() - 4));
}

namespace {

constexpr std::size_t no_key = static_cast<std::size_t>(-1);

std::optional<std::string_view> value_at(const std::vector<std::optional<std::string>>& values, std::size_t i) {
    if (i >= values.size() || !values[i]) return std::nullopt;
    return std::string_view(*values[i]);
}

}  // namespace

// Field by field: a store_key built whole and copied in costs the hot path store-forwarding
// stalls (its fields' stores are read back as wider loads).
void admission::set_key(std::size_t i, identity::kind kind, const digest& id, std::span<const tier> tiers,
                        std::uint32_t max_values) {
    store_key& k = keys_[i];
    k.kind = kind;
    k.id = id;
    k.tiers = tiers;
    k.max_values = max_values;
}

const std::string& admission::ip_text(const admission_context& ctx) {
    if (!ip_text_cached_ || who_->client != cached_text_client_) {
        ip_text_cached_ = true;
        cached_text_client_ = who_->client;
        cached_ip_text_ = identity::ip_identifier(who_->client, ctx.ipv6_prefix);
    }
    return cached_ip_text_;
}

std::size_t admission::values_of(const admission_context& ctx, const kind_tiers& k, part_values& values) {
    for (std::size_t i = 0; i < k.spec.parts.size(); ++i) {
        std::optional<std::string_view> v;
        switch (k.spec.parts[i].what) {
            case identity::part_kind::ip: v = ip_text(ctx); break;
            case identity::part_kind::user:
                if (!who_->user.empty()) v = who_->user;
                break;
            case identity::part_kind::route:
                if (route_ != nullptr && !route_->empty()) v = *route_;
                break;
            case identity::part_kind::header: v = value_at(who_->headers, k.slot[i]); break;
            case identity::part_kind::claim: v = value_at(who_->claims, k.slot[i]); break;
            case identity::part_kind::query: v = value_at(who_->queries, k.slot[i]); break;
        }
        if (!v) return i;
        values[i] = *v;
    }
    return no_key;
}

void admission::refuse_missing(outcome& out, std::string why) {
    out.what = outcome::kind::missing;
    out.decision = decision_kind::missing;
    out.reason = std::move(why);
}

bool admission::ambiguous(const kind_tiers& k, std::size_t i) const {
    const std::vector<std::size_t>* list = nullptr;
    if (k.spec.parts[i].what == identity::part_kind::header) list = &who_->ambiguous_headers;
    if (k.spec.parts[i].what == identity::part_kind::query) list = &who_->ambiguous_queries;
    return list != nullptr && std::find(list->begin(), list->end(), k.slot[i]) != list->end();
}

// Out of prepare(): a policy of ip and user alone keeps its path short.
bool admission::add_kinds(const admission_context& ctx, const policy& p, std::size_t& n, outcome& out) {
    for (const kind_tiers& k : p.kinds) {
        part_values values;
        if (const std::size_t missing = values_of(ctx, k, values); missing != no_key) {
            const bool twice = ambiguous(k, missing);
            if ((!k.refuse_missing && !twice) || p.shadow) continue;
            std::string why = twice ? "" : "missing ";
            config::append_part_text(why, k.spec.parts[missing]);
            if (k.spec.composite()) why.append(" (of ").append(k.spec.text).append(")");
            if (twice) {
                why.append(" given twice with different values: policy ").append(p.name);
                why.append(" cannot tell which to limit by");
                out.what = outcome::kind::ambiguous;
                out.decision = decision_kind::ambiguous;
                out.reason = std::move(why);
            } else {
                why.append(": policy ").append(p.name).append(" refuses requests without it");
                refuse_missing(out, std::move(why));
            }
            return false;
        }
        std::string_view input = values[0];
        if (k.spec.composite()) {
            k.spec.hash_input(std::span(values.data(), k.spec.parts.size()), input_);
            input = input_;
        }
        kind_tiers_[n] = &k;
        set_key(n++, static_cast<identity::kind>(k.id), ctx.hasher.hash(k.spec.text, input), k.tiers, k.max_values);
    }
    return true;
}

bool admission::prepare(const admission_context& ctx, const policy& p, std::int64_t cost, const identity::caller& who,
                        outcome& out, const std::string* route) {
    if (who.allow_listed) {
        out.decision = decision_kind::bypass;
        return false;
    }
    who_ = &who;
    route_ = route;
    // A connection's client and user rarely change: hash them once, not per request (and
    // again when a new config may have changed the hasher or the IPv6 prefix).
    if (ctx.generation != cached_for_) {
        cached_for_ = ctx.generation;
        ip_cached_ = ip_text_cached_ = user_cached_ = false;
    }
    std::size_t n = 0, user_key = no_key, ip_key = no_key;
    if (!p.ip.empty()) {
        if (!ip_cached_ || who.client != cached_client_) {
            ip_cached_ = true;
            cached_client_ = who.client;
            cached_ip_ = ctx.hasher.hash(to_string(identity::kind::ip), ip_text(ctx));
        }
        kind_tiers_[n] = nullptr;
        ip_key = n;
        set_key(n++, identity::kind::ip, cached_ip_, p.ip, 0);
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
            kind_tiers_[n] = nullptr;
            user_key = n;
            set_key(n++, identity::kind::user, cached_user_hash_, tiers, 0);
        }
    } else if (p.refuse_missing_user && !p.shadow) {
        refuse_missing(out, "missing user: policy " + p.name + " refuses requests without credentials");
        return false;
    }
    if (!p.kinds.empty() && !add_kinds(ctx, p, n, out)) return false;
    request_ = {std::span(keys_.data(), n), cost, p.count_rejected, 0};
    // Only a request that meets a concurrency tier draws a lease (a policy's may be in a
    // tier list this caller does not get, as a plan's).
    if (ctx.leases && p.concurrent) {
        const auto slot = [](const tier& t) { return t.algo == config::algorithm::concurrency; };
        for (std::size_t i = 0; i < n && request_.lease == 0; ++i)
            if (std::any_of(keys_[i].tiers.begin(), keys_[i].tiers.end(), slot)) request_.lease = ctx.leases->next();
    }
    if (n > 0) {
        const std::size_t named = user_key != no_key ? user_key : ip_key != no_key ? ip_key : 0;
        out.id_kind = keys_[named].kind;
        out.id = keys_[named].id;
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
        m.decided(p.metric_slot, metrics::decision_result::allowed, ctx.listener);
        out.decision = decision_kind::allowed;
    } else {
        if (const std::size_t refusing = refusing_key(d); refusing != no_key) {
            out.id_kind = request_.keys[refusing].kind;
            out.id = request_.keys[refusing].id;
            if (!p.shadow && ctx.refusals) record_refusal(ctx, p, refusing);
        }
        if (p.shadow) {
            m.decided(p.metric_slot, metrics::decision_result::shadow_limited, ctx.listener);
            out.decision = decision_kind::shadow_limited;
        } else {
            m.decided(p.metric_slot, metrics::decision_result::limited, ctx.listener);
            out.decision = decision_kind::limited;
            out.what = outcome::kind::limited;
            out.retry_after_s = retry_after_seconds(d);
        }
    }
    // A shadow policy stays invisible to clients.
    if (!p.shadow) append_rate_limit_fields(out.fields, d, ctx.headers);
}

std::size_t admission::refusing_key(const decision& d) const {
    std::size_t refusing = no_key;
    for (const tier_result& t : d.tiers) {
        if (!t.admitted && t.key_index < request_.keys.size() && (refusing == no_key || t.key_index > refusing))
            refusing = t.key_index;
    }
    return refusing;
}

// The identifier as the operator knows it: the address (IPv6 as limited, to its prefix), the
// user, or another kind's values joined by '+' as an admin path writes them.
std::string admission::label_of(const admission_context& ctx, std::size_t key) {
    std::string label;
    const kind_tiers* k = kind_tiers_[key];
    if (k == nullptr) {
        if (request_.keys[key].kind == identity::kind::ip)
            label = ip_text(ctx);
        else
            append_user_label(label, cached_user_);
        return label;
    }
    part_values values;
    if (values_of(ctx, *k, values) != no_key) return label;
    for (std::size_t i = 0; i < k->spec.parts.size(); ++i) {
        if (i > 0) label += '+';
        switch (k->spec.parts[i].what) {
            case identity::part_kind::ip: label.append(values[i]); break;
            case identity::part_kind::user: append_user_label(label, values[i]); break;
            default: append_label_value(label, values[i]); break;
        }
    }
    return label;
}

void admission::record_refusal(const admission_context& ctx, const policy& p, std::size_t key) {
    const store_key& k = request_.keys[key];
    const auto now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
    ctx.refusals->refused(now.count(), p.metric_slot, p.name, k.kind, k.id, label_of(ctx, key));
}

}  // namespace sluice::limit
