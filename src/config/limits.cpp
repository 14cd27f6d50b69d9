// Limits: tiers (the algorithms and their parameters), policies and plans, and the check
// that every plan named anywhere exists.
#include <algorithm>
#include <array>

#include "config/readers.hpp"

namespace sluice::config {

namespace detail {

namespace {

// Bounds that keep every limiter computation (integer microseconds) far from overflow.
constexpr duration max_per = std::chrono::hours(8784);
constexpr duration month_per = std::chrono::hours(31 * 24);  // per: month counts as the longest month
constexpr std::int64_t max_log_limit = 1000;
constexpr std::int64_t max_concurrency = 1000;
constexpr std::int64_t max_buckets = 120;

// In the declaration order of `algorithm`.
constexpr std::array<std::string_view, 5> algorithm_names{"fixed", "sliding", "gcra", "log", "concurrency"};

// Where the keys of a tier were written, for the checks that need the whole tier.
struct tier_nodes {
    std::optional<node_ref> limit, per, precision, burst, window_offset, algo, min_interval, concurrency, lease;
};

duration read_per(const node_ref& v, bool& month) {
    if (v.node().IsScalar() && v.node().Scalar() == "month") {
        month = true;
        return month_per;
    }
    duration d = read_duration(v, zero::refused);
    if (d > max_per) v.fail(per_too_large);
    return d;
}

// A duration with an optional sign: "-5h", "+90m".
duration read_signed_duration(const node_ref& v) {
    const std::string& text = v.scalar(bad_offset);
    const bool signed_text = text.starts_with('-') || text.starts_with('+');
    duration d = take(v, parse_duration_why(signed_text ? std::string_view(text).substr(1) : text));
    return text.starts_with('-') ? -d : d;
}

void settle_sliding(tier_config& t, const tier_nodes& at) {
    if (!at.precision) {
        if (t.per.count() % 10 != 0) at.per->fail(no_default_precision);
        t.precision = t.per / 10;
        return;
    }
    if (t.per % t.precision != duration::zero()) {
        at.precision->fail("must divide per (" + format_duration(t.per) + ") exactly");
    }
    if (t.per / t.precision > max_buckets) {
        at.precision->fail("too many buckets: per / precision is " + std::to_string(t.per / t.precision) +
                           ", at most " + std::to_string(max_buckets));
    }
}

void settle_gcra(tier_config& t, const tier_nodes& at) {
    if (!at.burst) {
        t.burst = t.limit;
        return;
    }
    double tolerance_ms =
        static_cast<double>(t.burst) * static_cast<double>(t.per.count()) / static_cast<double>(t.limit);
    if (tolerance_ms > static_cast<double>(max_per.count())) {
        at.burst->fail(gcra_tolerance_too_large);
    }
}

// Cross-key rules and defaults that depend on the algorithm.
void settle_tier(tier_config& t, const tier_nodes& at) {
    if (at.precision && t.algo != algorithm::sliding) at.precision->fail(precision_sliding_only);
    if (at.burst && t.algo != algorithm::gcra) at.burst->fail(burst_gcra_only);
    if (t.month && t.algo != algorithm::fixed) at.per->fail(month_fixed_only);
    if (at.window_offset) {
        if (t.algo != algorithm::fixed) at.window_offset->fail(offset_fixed_only);
        const auto bound = std::min(t.per, duration(std::chrono::hours(24)));
        if (t.window_offset >= bound || -t.window_offset >= bound) {
            at.window_offset->fail("must be between -" + format_duration(bound) + " and " + format_duration(bound) +
                                   ", exclusive");
        }
    }
    switch (t.algo) {
        case algorithm::sliding: settle_sliding(t, at); break;
        case algorithm::fixed: t.precision = t.per; break;
        case algorithm::gcra: settle_gcra(t, at); break;
        case algorithm::log:
            if (t.limit > max_log_limit) at.limit->fail(log_limit_too_large);
            break;
        case algorithm::concurrency: break;  // settle_concurrency
    }
}

// `{concurrency: N, lease: 30s}`: at most N requests in flight, each slot leased for `lease`.
void settle_concurrency(tier_config& t, const tier_nodes& at) {
    for (const auto* other :
         {&at.limit, &at.per, &at.algo, &at.precision, &at.burst, &at.min_interval, &at.window_offset}) {
        if (*other) (*other)->fail_at_key(concurrency_takes_lease_only);
    }
    t.algo = algorithm::concurrency;
    if (t.limit > max_concurrency) at.concurrency->fail(concurrency_too_large);
    if (!at.lease) {
        t.per = std::chrono::seconds(30);
    } else if (t.per < std::chrono::seconds(3) || t.per > std::chrono::hours(1)) {
        at.lease->fail(bad_lease);
    }
}

tier_config read_tier(const node_ref& n, const std::string& kind) {
    tier_config t;
    t.kind = kind;
    tier_nodes at;
    read_mapping(n,
                 {
                     {"concurrency",
                      [&](const node_ref& v) {
                          t.limit = read_count(v);
                          at.concurrency = v;
                      }},
                     {"lease",
                      [&](const node_ref& v) {
                          t.per = read_duration(v, zero::refused);
                          at.lease = v;
                      }},
                     {"limit",
                      [&](const node_ref& v) {
                          t.limit = read_count(v);
                          at.limit = v;
                      }},
                     {"per",
                      [&](const node_ref& v) {
                          t.per = read_per(v, t.month);
                          at.per = v;
                      }},
                     {"window_offset",
                      [&](const node_ref& v) {
                          t.window_offset = read_signed_duration(v);
                          at.window_offset = v;
                      }},
                     {"algorithm",
                      [&](const node_ref& v) {
                          t.algo = read_enum<algorithm>(v, {"fixed", "sliding", "gcra", "log"});  // as algorithm_names
                          at.algo = v;
                      }},
                     {"precision",
                      [&](const node_ref& v) {
                          t.precision = read_duration(v, zero::refused);
                          at.precision = v;
                      }},
                     {"burst",
                      [&](const node_ref& v) {
                          t.burst = read_count(v);
                          at.burst = v;
                      }},
                     {"min_interval",
                      [&](const node_ref& v) {
                          t.min_interval = read_duration(v, zero::allowed);
                          at.min_interval = v;
                      }},
                 });
    if (at.concurrency) {
        settle_concurrency(t, at);
        return t;
    }
    if (at.lease) at.lease->fail_at_key(lease_needs_concurrency);
    if (!at.limit)
        n.fail_at(n.mark(), n.path_of("limit"), "required key is missing (a tier has limit and per, or concurrency)");
    if (!at.per) n.fail_at(n.mark(), n.path_of("per"), "required key is missing");
    settle_tier(t, at);
    return t;
}

std::vector<tier_config> read_tiers(const node_ref& v, const std::string& kind) {
    std::vector<tier_config> out;
    schema::read_sequence(v, [&](const node_ref& item) {
        tier_config t = read_tier(item, kind);
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (shares_counter(out[i], t)) {
                item.fail(t.algo == algorithm::concurrency
                              ? "duplicate tier (tier " + std::to_string(i) + " is a concurrency tier too)"
                              : "duplicate tier (tier " + std::to_string(i) +
                                    " has the same algorithm, per and precision or burst: both would count in one "
                                    "place)");
            }
        }
        out.push_back(std::move(t));
    });
    return out;
}

bool has_log_tier(const std::vector<tier_config>& tiers) {
    return std::any_of(tiers.begin(), tiers.end(), [](const tier_config& t) { return t.algo == algorithm::log; });
}

// policies.<name>.<kind>: a kind other than ip and user, and its tiers.
void read_kind(const node_ref& v, const std::string& key, policy_config& p) {
    if (v.describing()) {
        read_tiers(v, key);
        return;
    }
    auto parsed = parse_kind_spec(key);
    if (!parsed.ok()) v.fail_at_key(parsed.error);
    kind_spec& spec = parsed.spec;
    for (const auto& k : p.kinds) {
        if (k.spec.text == spec.text) v.fail_at_key("the same kind as " + k.path + " (" + spec.text + ")");
    }
    kind_tiers_config k;
    k.at = v.where();
    k.path = v.path();
    k.tiers = read_tiers(v, spec.text);
    if (k.tiers.empty()) v.fail(kind_without_tiers);
    k.spec = std::move(spec);
    p.kinds.push_back(std::move(k));
}

// The kind a key of on_missing or max_values names: one the policy limits by.
const kind_spec* limited_kind(const policy_config& p, const node_ref& v, const std::string& key) {
    if (key == "ip" || key == "user") return nullptr;
    auto parsed = parse_kind_spec(key);
    if (!parsed.ok()) v.fail_at_key(parsed.error);
    for (const auto& k : p.kinds)
        if (k.spec.text == parsed.spec.text) return &k.spec;
    v.fail_at_key("the policy has no tiers for " + parsed.spec.text);
}

// Read once the whole policy is: the kinds they name may come after them.
struct deferred_entry {
    std::string key;
    node_ref value;
};

// One kind named twice in a mapping, in two spellings (header names compare in lower case):
// refused, or which one holds would depend on their order.
void named_once(std::vector<std::pair<std::string, std::string>>& seen, const std::string& text, const node_ref& v) {
    for (const auto& [t, path] : seen)
        if (t == text) {
            std::string why = "the same kind as ";
            why += path;
            why += " (";
            why += text;
            why += ')';
            v.fail_at_key(why);
        }
    seen.emplace_back(text, v.path());
}

void settle_on_missing(policy_config& p, const std::vector<deferred_entry>& entries) {
    std::vector<std::pair<std::string, std::string>> seen;
    for (const auto& [key, v] : entries) {
        const auto choice = static_cast<on_missing>(schema::read_choice_index(v, {"skip", "refuse"}));
        if (key == "ip") v.fail_at_key(ip_never_missing);
        if (key == "user") {
            if (p.user.empty() && !p.user_by_plan) v.fail_at_key("the policy has no tiers for user");
            p.user_missing = choice;
            continue;
        }
        const kind_spec* spec = limited_kind(p, v, key);
        named_once(seen, spec->text, v);
        for (auto& k : p.kinds)
            if (&k.spec == spec) k.missing = choice;
    }
}

void settle_max_values(policy_config& p, const std::vector<deferred_entry>& entries) {
    std::vector<std::pair<std::string, std::string>> seen;
    for (const auto& [key, v] : entries) {
        const std::uint64_t n = schema::read_uint(v, min_max_values, max_max_values);
        const kind_spec* spec = limited_kind(p, v, key);
        if (spec == nullptr || !bounded_kind(*spec)) v.fail_at_key(max_values_unbounded_kind);
        named_once(seen, spec->text, v);
        for (auto& k : p.kinds)
            if (&k.spec == spec) k.max_values = n;
    }
}

policy_config read_policy(const node_ref& n, const std::string& name) {
    policy_config p;
    std::optional<node_ref> count_rejected_at;
    std::vector<deferred_entry> missing, bounds;
    p.name = name;
    const auto deferred = [](std::vector<deferred_entry>& into) {
        return [&into](const node_ref& v) {
            schema::read_entries(
                v,
                [&](const std::string& key, const node_ref& e) {
                    into.push_back({key, e});
                },
                "kind");
        };
    };
    read_mapping(n,
                 {
                     {"shadow", [&](const node_ref& v) { p.shadow = schema::read_bool(v); }},
                     {"count_rejected",
                      [&](const node_ref& v) {
                          p.count_rejected = schema::read_bool(v);
                          count_rejected_at = v;
                      }},
                     {"ip", [&](const node_ref& v) { p.ip = read_tiers(v, "ip"); }},
                     {"user",
                      [&](const node_ref& v) {
                          if (v.node().IsScalar() && v.node().Scalar() == "plan") {
                              p.user_by_plan = true;
                              p.user_at = v.where();
                          } else {
                              p.user = read_tiers(v, "user");
                          }
                      }},
                     {"on_missing", deferred(missing)},
                     {"max_values", deferred(bounds)},
                 },
                 "kind", [&](const std::string& key, const node_ref& v) { read_kind(v, key, p); });
    if (p.ip.empty() && p.user.empty() && !p.user_by_plan && p.kinds.empty()) n.fail(policy_without_tiers);
    const std::size_t kinds = p.kinds.size() + (p.ip.empty() ? 0 : 1) + (p.user.empty() && !p.user_by_plan ? 0 : 1);
    if (kinds > max_policy_kinds) n.fail(too_many_kinds);
    if (p.count_rejected) {
        bool log = has_log_tier(p.ip) || has_log_tier(p.user);
        for (const auto& k : p.kinds) log = log || has_log_tier(k.tiers);
        if (log) count_rejected_at->fail(count_rejected_with_log);
    }
    settle_on_missing(p, missing);
    settle_max_values(p, bounds);
    return p;
}

}  // namespace

std::vector<tier_config> read_tier_list(const node_ref& v, const std::string& kind) { return read_tiers(v, kind); }

void read_policies(const node_ref& n, std::vector<policy_config>& out) {
    schema::read_entries(n, [&](const std::string& name, const node_ref& v) {
        if (name == "none") v.fail_at_key(reserved_policy_name);
        if (!is_policy_name(name)) v.fail_at_key(bad_policy_name);
        out.push_back(read_policy(v, name));
    });
}

void read_plans(const node_ref& n, std::vector<plan_config>& out) {
    schema::read_entries(n, [&](const std::string& name, const node_ref& v) {
        if (!is_policy_name(name)) v.fail_at_key(bad_plan_name);
        plan_config plan{name, {}};
        read_mapping(v, {{"user", [&](const node_ref& u) { plan.user = read_tiers(u, "user"); }, presence::required}});
        if (plan.user.empty()) v.fail(plan_without_tiers);
        out.push_back(std::move(plan));
    });
}

namespace {

// Entries with `tiers: plan` (service.domains): the registry and plans they read must exist.
void check_plan_descriptors(const config& c, const std::vector<descriptor_config>& list) {
    for (const auto& d : list) {
        check_plan_descriptors(c, d.descriptors);
        if (!d.by_plan) continue;
        if (c.plans.empty()) throw config_error(d.by_plan_at + ": tiers: plan needs plans (plans.<name>.user)");
        if (!c.clients.api_keys)
            throw config_error(d.by_plan_at + ": tiers: plan needs a key registry (clients.user.api_keys)");
        for (const auto& plan : c.plans) {
            for (const auto& t : plan.user) {
                if (t.algo == algorithm::concurrency)
                    throw config_error(d.by_plan_at + ": tiers: plan: plans." + plan.name +
                                       " has a concurrency tier, and a descriptor holds no request in flight");
            }
        }
        if (d.policy.empty()) continue;
        const auto* p = c.find_policy(d.policy);
        if (p == nullptr) throw config_error(d.policy_at + ": no policy named \"" + d.policy + "\"");
        if (!p->user_by_plan)
            throw config_error(d.policy_at + ": policy " + d.policy + " has no `user: plan` whose tiers to share");
        if (p->count_rejected)
            throw config_error(d.policy_at + ": policy " + d.policy +
                               " counts refused requests (count_rejected), which a descriptor does not");
    }
}

}  // namespace

void check_plans(const config& c) {
    for (const auto& d : c.service.domains) check_plan_descriptors(c, d.descriptors);
    const auto known = [&](const std::string& name, const std::string& at) {
        if (!name.empty() && c.find_plan(name) == nullptr) throw config_error(at + ": no plan named \"" + name + "\"");
    };
    known(c.clients.default_plan, c.clients.default_plan_at);
    const bool has_user_source = !c.clients.api_key_header.empty() || c.clients.jwt.has_value();
    if (!c.clients.default_plan.empty() && !has_user_source)
        throw config_error(c.clients.default_plan_at + ": " + std::string(plan_needs_user_source));
    if (c.clients.api_keys) {
        for (const auto& e : c.clients.api_keys->keys) known(e.plan, e.plan_at);
    }
    for (const auto& p : c.policies) {
        for (const auto& k : p.kinds) {
            const bool claims = std::any_of(k.spec.parts.begin(), k.spec.parts.end(),
                                            [](const kind_part& part) { return part.what == part_kind::claim; });
            if (claims && !c.clients.jwt) throw config_error(k.at + ": " + std::string(claim_needs_jwt));
        }
        if (p.user_by_plan && c.plans.empty())
            throw config_error(p.user_at + ": " + std::string(plan_policy_needs_plans));
        if (p.user_by_plan && !has_user_source)
            throw config_error(p.user_at + ": " + std::string(plan_needs_user_source));
        if (!p.user_by_plan || !p.count_rejected) continue;
        for (const auto& plan : c.plans) {
            if (has_log_tier(plan.user)) {
                std::string why(count_rejected_with_log);
                why.append(", and plans.").append(plan.name).append(" has one");
                throw config_error(p.user_at + ": " + why);
            }
        }
    }
}

}  // namespace detail

std::string_view to_string(algorithm a) { return detail::algorithm_names[static_cast<std::size_t>(a)]; }

namespace {

constexpr duration max_expires_in = std::chrono::hours(8784);

}  // namespace

override_config read_override(const std::string& text, const std::string& source, const std::string& kind) {
    const YAML::Node doc = detail::parse_document(text, source);
    const detail::node_ref root(doc, source);
    if (!root.node().IsMap()) root.fail("expected a JSON object");
    override_config out;
    std::optional<detail::node_ref> policy_at, tiers_at, plan_at, expires_at;
    detail::read_mapping(
        root, {
                  {"policy",
                   [&](const detail::node_ref& v) {
                       out.policy = detail::read_checked(v, detail::is_policy_name, detail::expected_policy_name);
                       policy_at = v;
                   }},
                  {"tiers",
                   [&](const detail::node_ref& v) {
                       out.tiers = detail::read_tiers(v, kind);
                       if (out.tiers.empty()) v.fail(detail::kind_without_tiers);
                       tiers_at = v;
                   }},
                  {"plan",
                   [&](const detail::node_ref& v) {
                       out.plan = detail::read_checked(v, detail::is_policy_name, detail::bad_plan_name);
                       plan_at = v;
                   }},
                  {"expires_in",
                   [&](const detail::node_ref& v) {
                       out.expires_in = detail::read_duration(v, detail::zero::refused);
                       if (out.expires_in > max_expires_in) v.fail("must be at most 8784h");
                   },
                   detail::presence::required},
              });
    if (plan_at && (policy_at || tiers_at))
        (policy_at ? policy_at : tiers_at)->fail_at_key("give either plan, or policy and tiers");
    if (!plan_at && !policy_at)
        root.fail_at(root.mark(), root.path_of("policy"), "required key is missing (give policy and tiers, or plan)");
    if (policy_at && !tiers_at) root.fail_at(root.mark(), root.path_of("tiers"), "required key is missing");
    if (tiers_at && !policy_at) root.fail_at(root.mark(), root.path_of("policy"), "required key is missing");
    return out;
}

std::vector<tier_config> read_override_tiers(const std::string& text, const std::string& source,
                                             const std::string& kind) {
    const YAML::Node doc = detail::parse_document(text, source);
    const detail::node_ref root(doc, source);
    return detail::read_tiers(root, kind);
}

}  // namespace sluice::config
