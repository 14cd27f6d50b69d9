#include "limit/controls.hpp"

#include "base/text.hpp"
#include "identity/kind_spec.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace sluice::limit {

namespace {

constexpr std::size_t hex_size = 32;

bool read_hex(std::string_view hex, digest& out) {
    if (hex.size() != hex_size) return false;
    const auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < out.size(); ++i) {
        const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return true;
}

std::string field_of(char type, const digest& id, std::string_view policy, std::string_view kind) {
    std::string f(1, type);
    f += ':';
    base::append_hex(f, id);
    f += ':';
    if (type == 'o') {
        f.append(policy.empty() ? std::string_view("@") : policy);
        f += ':';
    }
    f.append(kind);
    return f;
}

std::int64_t int_of(const boost::json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    return v && v->is_int64() ? v->as_int64() : -1;
}

}  // namespace

std::int64_t unix_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string control_record::block_field(std::string_view kind, const digest& id) { return field_of('b', id, {}, kind); }

std::string control_record::override_field(std::string_view kind, const digest& id, std::string_view policy) {
    return field_of('o', id, policy, kind);
}

std::string control_record::field() const {
    switch (what) {
        case type::block: return block_field(kind, id);
        case type::override_tiers: return override_field(kind, id, policy);
        case type::override_plan: return override_field(kind, id, {});
    }
    return {};
}

std::string control_record::value() const {
    boost::json::object o;
    o["at"] = at_ms;
    o["until"] = until_ms;
    if (what == type::override_plan) o["plan"] = plan;
    std::string out = boost::json::serialize(o);
    if (what == type::override_tiers) {
        // The tiers as the admin API took them (JSON text), so that every gateway reads them
        // with the same readers.
        out.pop_back();
        out += ",\"tiers\":";
        out += tiers;
        out += '}';
    }
    return out;
}

std::optional<control_record> control_record::parse(std::string_view field, std::string_view value) {
    control_record r;
    if (field.size() < 2 + hex_size + 2 || field[1] != ':' || field[2 + hex_size] != ':') return std::nullopt;
    if (!read_hex(field.substr(2, hex_size), r.id)) return std::nullopt;
    std::string_view rest = field.substr(3 + hex_size);
    boost::system::error_code ec;
    auto json = boost::json::parse(value, ec);
    if (ec || !json.is_object()) return std::nullopt;
    const auto& o = json.as_object();
    r.at_ms = int_of(o, "at");
    r.until_ms = int_of(o, "until");
    if (r.at_ms < 0 || r.until_ms < 0) return std::nullopt;
    if (field[0] == 'b') {
        r.what = type::block;
    } else if (field[0] == 'o') {
        const auto colon = rest.find(':');
        if (colon == std::string_view::npos) return std::nullopt;
        const std::string_view policy = rest.substr(0, colon);
        rest = rest.substr(colon + 1);
        if (policy == "@") {
            const auto* plan = o.if_contains("plan");
            if (!plan || !plan->is_string()) return std::nullopt;
            r.what = type::override_plan;
            r.plan = plan->as_string();
        } else {
            const auto* tiers = o.if_contains("tiers");
            if (!tiers || !tiers->is_array()) return std::nullopt;
            r.what = type::override_tiers;
            r.policy = policy;
            r.tiers = boost::json::serialize(*tiers);
        }
    } else {
        return std::nullopt;
    }
    if (rest.empty()) return std::nullopt;
    r.kind = rest;
    return r;
}

std::size_t controls::key_hash::operator()(const key& k) const {
    std::size_t h;
    std::memcpy(&h, k.id.data(), sizeof h);  // the id is a keyed hash already
    return h ^ static_cast<std::size_t>(k.kind);
}

const controls::entry* controls::find(identity::kind k, const digest& id) const {
    const auto it = map_.find(key{k, id});
    return it == map_.end() ? nullptr : &it->second;
}

std::vector<tier> compile_override(const std::string& policy, std::int64_t at_ms,
                                   const std::vector<config::tier_config>& tiers) {
    config::policy_config named;
    named.ip = tiers;  // tier_names() reads each tier's own kind
    const auto names = tier_names(named);
    const std::string base = policy + '!' + std::to_string(at_ms);
    std::vector<tier> out;
    for (std::size_t i = 0; i < tiers.size(); ++i)
        out.push_back(tier::from(tiers[i], tier_id(base, tiers[i]), names[i]));
    return out;
}

std::shared_ptr<const controls> controls::build(std::vector<control_record> records, std::int64_t now_ms,
                                                std::vector<std::string>* skipped) {
    auto out = std::make_shared<controls>();
    const auto skip = [&](const control_record& r, const std::string& why) {
        if (skipped) skipped->push_back(r.field() + ": " + why);
    };
    for (auto& r : records) {
        if (r.until_ms <= now_ms) continue;
        // Only a kind's canonical text names a kind (kind_of keeps every text it is given).
        const auto spec = identity::parse_kind_spec(r.kind);
        if (!spec.ok() || spec.spec.text != r.kind) {
            skip(r, "not a kind");
            continue;
        }
        identity::kind k;
        try {
            k = identity::kind_of(r.kind);
        } catch (const std::exception& e) {
            skip(r, e.what());
            continue;
        }
        entry e;
        if (r.what == control_record::type::block) {
            e.block_until_ms = r.until_ms;
        } else {
            override_entry o;
            o.until_ms = r.until_ms;
            if (r.what == control_record::type::override_plan) {
                o.plan = r.plan;
            } else {
                try {
                    o.policy = r.policy;
                    o.tiers =
                        compile_override(r.policy, r.at_ms, config::read_override_tiers(r.tiers, "override", r.kind));
                } catch (const std::exception& ex) {
                    skip(r, ex.what());
                    continue;
                }
                o.concurrent = std::any_of(o.tiers.begin(), o.tiers.end(),
                                           [](const tier& t) { return t.algo == config::algorithm::concurrency; });
            }
            e.overrides.push_back(std::move(o));
        }
        auto& into = out->map_[key{k, r.id}];
        if (e.block_until_ms) into.block_until_ms = std::max(into.block_until_ms, e.block_until_ms);
        for (auto& o : e.overrides) {
            out->has_plans_ = out->has_plans_ || !o.plan.empty();
            into.overrides.push_back(std::move(o));
        }
        out->next_end_ms_ = std::min(out->next_end_ms_, r.until_ms);
        if (r.what == control_record::type::block) ++out->blocks_;
        out->records_.push_back(std::move(r));
    }
    return out;
}

const std::string* control_step::plan_of(const controls& c, const digest& user_id, std::int64_t now_ms) {
    const auto* e = c.find(identity::kind::user, user_id);
    if (!e) return nullptr;
    for (const auto& o : e->overrides)
        if (!o.plan.empty() && o.until_ms > now_ms) return &o.plan;
    return nullptr;
}

control_step::result control_step::apply(const controls& c, const policy& p, const check_request& r,
                                         std::int64_t now_ms, lease_ids* leases) {
    bool overridden = false;
    for (std::size_t i = 0; i < r.keys.size(); ++i) {
        const auto* e = c.find(r.keys[i].kind, r.keys[i].id);
        if (!e) continue;
        if (e->block_until_ms > now_ms) {
            blocked_key_ = i;
            blocked_until_ms_ = e->block_until_ms;
            return result::blocked;
        }
        for (const auto& o : e->overrides) {
            if (o.policy != p.name || o.until_ms <= now_ms) continue;
            if (!overridden) {
                std::copy(r.keys.begin(), r.keys.end(), keys_.begin());
                request_ = r;
                request_.keys = std::span(keys_.data(), r.keys.size());
                overridden = true;
            }
            keys_[i].tiers = o.tiers;
            if (o.concurrent && request_.lease == 0 && leases) request_.lease = leases->next();
        }
    }
    return overridden ? result::overridden : result::none;
}

}  // namespace sluice::limit
