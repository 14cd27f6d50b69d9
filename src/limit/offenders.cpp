#include "limit/offenders.hpp"

#include <algorithm>
#include <cstring>

namespace sluice::limit {

std::size_t offenders::key_hash::operator()(const offender& o) const {
    std::size_t h;  // the digest is a keyed hash already: its bytes are uniform
    std::memcpy(&h, o.id.data(), sizeof h);
    return h ^ (o.policy_slot * 0x9e3779b97f4a7c15ULL) ^ static_cast<std::size_t>(o.kind);
}

namespace {

offender key_of(std::size_t policy_slot, identity::kind kind, const digest& id) {
    offender k;
    k.policy_slot = policy_slot;
    k.kind = kind;
    k.id = id;
    return k;
}

}  // namespace

void append_label_value(std::string& out, std::string_view v) {
    constexpr std::size_t shown = 64;
    const bool cut = v.size() > shown;
    if (cut) v = v.substr(0, shown);
    for (const char c : v) {
        const auto u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u >= 0x7f || c == '%' || c == '+' || c == '/' || c == '"' || c == '\\') {
            constexpr std::string_view upper = "0123456789ABCDEF";
            out += '%';
            out += upper[u >> 4];
            out += upper[u & 0x0f];
        } else {
            out += c;
        }
    }
    if (cut) out += "…";
}

void offenders::refused(std::int64_t now_s, std::size_t policy_slot, std::string_view policy, identity::kind kind,
                        const digest& id, std::string_view label) {
    const std::int64_t number = now_s / period_s;
    std::lock_guard lock(mu_);
    period& p = periods_[static_cast<std::size_t>(number) % periods];
    if (p.number != number) {
        p.number = number;
        p.items.clear();
        p.index.clear();
    }
    const offender k = key_of(policy_slot, kind, id);
    if (auto it = p.index.find(k); it != p.index.end()) {
        ++p.items[it->second].refusals;
        return;
    }
    std::size_t slot = p.items.size();
    std::uint64_t inherited = 0;
    if (slot < capacity) {
        p.items.emplace_back();
    } else {
        auto least = std::min_element(p.items.begin(), p.items.end(),
                                      [](const offender& a, const offender& b) { return a.refusals < b.refusals; });
        slot = static_cast<std::size_t>(least - p.items.begin());
        inherited = least->refusals;
        p.index.erase(*least);
    }
    offender& o = p.items[slot];
    o.policy_slot = policy_slot;
    o.kind = kind;
    o.id = id;
    o.label.assign(label);
    o.policy.assign(policy);
    o.refusals = inherited + 1;
    o.overcount = inherited;
    p.index.emplace(key_of(policy_slot, kind, id), slot);
}

void offenders::collect(std::int64_t now_s, std::vector<offender>& into) const {
    const std::int64_t newest = now_s / period_s;
    std::lock_guard lock(mu_);
    for (const period& p : periods_) {
        if (p.number < 0 || p.number > newest || newest - p.number >= static_cast<std::int64_t>(periods)) continue;
        into.insert(into.end(), p.items.begin(), p.items.end());
    }
}

std::vector<offender> offenders::merge(const std::vector<offender>& all) {
    std::vector<offender> out;
    std::unordered_map<offender, std::size_t, key_hash, key_equal> index;
    for (const offender& o : all) {
        auto [it, fresh] = index.try_emplace(key_of(o.policy_slot, o.kind, o.id), out.size());
        if (fresh) {
            out.push_back(o);
        } else {
            out[it->second].refusals += o.refusals;
            out[it->second].overcount += o.overcount;
        }
    }
    return out;
}

std::vector<offender> offenders::top(std::vector<offender> all, std::size_t n) {
    all = merge(all);
    std::sort(all.begin(), all.end(), [](const offender& a, const offender& b) {
        return a.refusals != b.refusals ? a.refusals > b.refusals : a.label < b.label;
    });
    if (all.size() > n) all.resize(n);
    return all;
}

}  // namespace sluice::limit
