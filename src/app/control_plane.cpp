#include "app/control_plane.hpp"

#include "http/async.hpp"
#include "identity/kind_spec.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/json.hpp>
#include <boost/url/parse_query.hpp>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <variant>

namespace sluice::app {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using http::use_tuple;

namespace {

constexpr auto poll_interval = std::chrono::seconds(1);
constexpr config::duration max_block = std::chrono::hours(8784);

admin_reply json_reply(unsigned status, const boost::json::object& o) {
    return {status, boost::json::serialize(o), {}};
}

admin_reply error_reply(unsigned status, std::string_view error, std::string_view message,
                        std::string_view field = {}) {
    boost::json::object o;
    o["error"] = error;
    o["message"] = message;
    if (!field.empty()) o["field"] = field;
    return json_reply(status, o);
}

admin_reply not_allowed(std::string allow) {
    auto r = error_reply(405, "method_not_allowed", "allowed: " + allow);
    r.allow = std::move(allow);
    return r;
}

admin_reply store_failed() {
    return error_reply(503, "store_unavailable", "the rate-limit store did not answer; nothing was changed for sure");
}

// A query's parameters, decoded, in order; nullopt when it does not parse.
std::optional<std::vector<std::pair<std::string, std::string>>> params_of(std::string_view query) {
    std::vector<std::pair<std::string, std::string>> out;
    if (query.empty()) return out;
    // A terminated copy: Boost.URL 1.81's parse_query reads up to a NUL.
    const std::string terminated(query);
    auto params = boost::urls::parse_query(terminated);
    if (!params) return std::nullopt;
    for (const auto& p : *params) out.emplace_back(p.key.decode(), p.has_value ? p.value.decode() : std::string());
    return out;
}

// "SOURCE:LINE:COLUMN: key.path: reason" -> (key.path, "key.path: reason").
std::pair<std::string, std::string> field_and_reason(const std::string& error) {
    std::size_t at = 0;
    for (int colons = 0; colons < 3 && at != std::string::npos; ++colons) {
        at = error.find(':', at);
        if (at != std::string::npos) ++at;
    }
    std::string reason = at == std::string::npos ? error : error.substr(at + (at < error.size() && error[at] == ' '));
    const auto end = reason.find(": ");
    std::string field = end == std::string::npos ? std::string() : reason.substr(0, end);
    if (field == "(root)") field.clear();
    return {field, reason};
}

const char* algorithm_name(const limit::tier& t) {
    if (t.month) return "fixed";
    return config::to_string(t.algo).data();  // (the names are literals)
}

boost::json::object tier_json(const limit::tier& t, const limit::tier_result* r) {
    boost::json::object o;
    o["name"] = t.name;
    o["algorithm"] = algorithm_name(t);
    o["limit"] = t.limit;
    if (t.algo == config::algorithm::concurrency) {
        o["lease_ms"] = t.per / 1000;
    } else if (t.month) {
        o["per"] = "month";
    } else {
        o["per_ms"] = t.per / 1000;
    }
    if (t.algo == config::algorithm::gcra) o["burst"] = t.burst;
    if (!r) return o;
    const std::int64_t capacity = t.algo == config::algorithm::gcra ? t.burst : t.limit;
    const std::int64_t remaining = std::max<std::int64_t>(r->remaining, 0);
    o["used"] = std::max<std::int64_t>(capacity - r->remaining, 0);
    o["remaining"] = remaining;
    if (t.algo == config::algorithm::concurrency) {
        o["held"] = std::max<std::int64_t>(capacity - r->remaining, 0);
    } else {
        o["reset"] = limit::ceil_s(r->reset);
        o["reset_ms"] = r->reset <= 0 ? 0 : (r->reset + 999) / 1000;
    }
    return o;
}

// The store operations the admin runs on a worker (control_plane::on_worker). `r` is the
// caller's, alive until the answer.
asio::awaitable<std::optional<store::redis_admin::control_reply>> control_on(store::redis_store& s,
                                                                             std::vector<std::string> args) {
    auto reply = co_await s.control(std::move(args));
    co_return reply;
}

asio::awaitable<limit::check_result> query_on(limit::store& s, const limit::check_request& r) {
    auto res = s.try_check(r);
    if (!res) res = co_await s.check(r);
    co_return std::move(*res);
}

asio::awaitable<bool> reset_on(limit::store& s, const limit::check_request& r) {
    const bool done = co_await s.reset(r);
    co_return done;
}

// (Built outside the coroutines: GCC 12 mishandles a conditional expression's temporaries there.)
admin_reply unknown_tier(const std::string& name, const std::string& policy, const std::string& kind) {
    std::string why = "no tier " + name;
    if (!policy.empty()) why += " in policy " + policy;
    why += " for " + kind + " (GET the identity for its tiers' names)";
    return error_reply(404, "unknown_tier", why);
}

admin_reply no_override(const std::string& policy) {
    if (policy.empty()) return error_reply(404, "no_override", "no override on this identifier");
    return error_reply(404, "no_override", "no override of policy " + policy + " on this identifier");
}

boost::json::value parsed_or_text(const std::string& text) {
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec);
    if (ec) return boost::json::value(text);
    return v;
}

}  // namespace

struct control_plane::identity_ref {
    identity::kind_spec spec;
    identity::kind kind = identity::kind::ip;
    limit::digest id{};
    std::shared_ptr<const server::snapshot> snap;
    std::string hex() const { return identity::hasher::to_hex(id); }
};

struct control_plane::tier_set {
    std::string policy;
    std::string plan;  // a plan's user tiers
    bool overridden = false;
    std::vector<limit::tier> tiers;
};

control_plane::control_plane(asio::io_context& main, std::vector<worker_link> workers, identity::hasher hasher,
                             std::function<std::shared_ptr<const server::snapshot>()> snapshot,
                             metrics::registry& metrics)
    : main_(main),
      workers_(std::move(workers)),
      hasher_(std::move(hasher)),
      snapshot_(std::move(snapshot)),
      metrics_(metrics),
      current_(limit::controls::build({}, 0)) {
    if (workers_.empty()) throw std::invalid_argument("control_plane: no workers");
}

std::pair<std::size_t, std::size_t> control_plane::counts() const {
    return {current_->blocks(), current_->overrides()};
}

void control_plane::load_then(std::function<void()> next) {
    asio::co_spawn(
        main_,
        [this, next = std::move(next)]() -> asio::awaitable<void> {
            busy_ = true;
            const bool ok = co_await refresh(true);
            busy_ = false;
            if (!ok) spdlog::warn("the blocks and overrides could not be read from the store yet; trying every second");
            next();
        },
        [](const std::exception_ptr& e) {
            if (e) spdlog::error("admin controls: the first read ended by an exception");
        });
}

void control_plane::start() {
    asio::co_spawn(main_, poll(), [](const std::exception_ptr& e) {
        if (e) spdlog::error("admin controls: the poll ended by an exception");
    });
}

void control_plane::stop() {
    stopped_ = true;
    timer_.cancel();
}

asio::awaitable<void> control_plane::poll() {
    while (!stopped_) {
        timer_.expires_after(poll_interval);
        auto [ec] = co_await timer_.async_wait(use_tuple);
        if (ec || stopped_) co_return;
        if (busy_) continue;
        busy_ = true;
        try {
            const bool ok = co_await refresh(false);
            (void)ok;  // logged by the store; tried again next turn
        } catch (const std::exception& e) {
            spdlog::warn("admin controls: {}", e.what());
        }
        busy_ = false;
    }
}

void control_plane::publish(std::vector<limit::control_record> records) {
    std::vector<std::string> skipped;
    auto c = limit::controls::build(std::move(records), limit::unix_ms(), &skipped);
    for (const auto& s : skipped) spdlog::warn("admin controls: an entry this gateway cannot apply is skipped: {}", s);
    current_ = c;
    for (const auto& w : workers_)
        asio::post(w.worker->ioc, [w = w.worker, c] {
            w->controls = c;
            w->store.on_reload();  // cached denials may be lifted now
        });
}

asio::awaitable<bool> control_plane::refresh(bool force) {
    bool changed = force;
    if (shared()) {
        // (No conditional expression making a temporary in a coroutine: GCC 12.)
        std::vector<std::string> args{std::string("read"), std::string()};
        if (version_ && !force) args[1] = std::to_string(*version_);
        const auto& w = next_worker();
        auto op = control_on(*w.redis, std::move(args));
        auto reply = co_await on_worker(w, std::move(op));
        if (!reply) co_return false;
        version_ = reply->version;
        if (reply->changed) {
            entries_.clear();
            for (auto& [f, v] : reply->entries) entries_.emplace(std::move(f), std::move(v));
            changed = true;
        }
    }
    // Entries past their end: out of the snapshot now, and out of the store (only if no one
    // has set them again meanwhile: the value must still be the one read).
    const auto now = limit::unix_ms();
    std::vector<std::string> prune{std::string("prune")};
    std::vector<limit::control_record> records;
    for (auto it = entries_.begin(); it != entries_.end();) {
        const auto r = limit::control_record::parse(it->first, it->second);
        if (r && r->until_ms <= now) {
            prune.push_back(it->first);
            prune.push_back(it->second);
            it = entries_.erase(it);
            changed = true;
            continue;
        }
        if (r) records.push_back(*r);
        ++it;
    }
    if (prune.size() > 1 && shared()) {
        const auto& w = next_worker();
        auto op = control_on(*w.redis, std::move(prune));
        auto pruned = co_await on_worker(w, std::move(op));
        (void)pruned;  // a failed prune is tried again by the next poll
    }
    if (changed || now >= current_->next_end_ms()) publish(std::move(records));
    co_return true;
}

asio::awaitable<bool> control_plane::change(std::vector<std::string> args) {
    if (!shared()) {
        if (args.front() == "set") {
            for (std::size_t i = 1; i + 1 < args.size(); i += 2) entries_[args[i]] = args[i + 1];
        } else if (args.front() == "del") {
            for (std::size_t i = 1; i < args.size(); ++i) entries_.erase(args[i]);
        }
        const bool done = co_await refresh(true);
        co_return done;
    }
    const auto& w = next_worker();
    auto op = control_on(*w.redis, std::move(args));
    auto reply = co_await on_worker(w, std::move(op));
    if (!reply) co_return false;
    // Read back whole: this gateway applies the change at once, the others at their next poll.
    const bool read = co_await refresh(true);
    (void)read;
    co_return true;
}

std::vector<control_plane::tier_set> control_plane::tier_sets(const identity_ref& who) const {
    std::vector<tier_set> out;
    const auto now = limit::unix_ms();
    const auto* controlled = current_->find(who.kind, who.id);
    for (const auto& p : who.snap->policies) {
        std::vector<tier_set> sets;
        if (who.spec.text == "ip") {
            if (!p.ip.empty()) sets.push_back({p.name, "", false, p.ip});
        } else if (who.spec.text == "user") {
            if (!p.user.empty()) sets.push_back({p.name, "", false, p.user});
            if (p.user_by_plan)
                for (const auto& plan : p.plans) sets.push_back({p.name, plan.plan, false, plan.user});
        } else {
            for (const auto& k : p.kinds)
                if (k.spec.text == who.spec.text) sets.push_back({p.name, "", false, k.tiers});
        }
        if (sets.empty()) continue;
        if (controlled)
            for (const auto& o : controlled->overrides)
                if (o.policy == p.name && o.until_ms > now) sets = {{p.name, "", true, o.tiers}};
        for (auto& s : sets) out.push_back(std::move(s));
    }
    return out;
}

void control_plane::log_action(std::string_view action, const identity_ref* who, const admin_request& req,
                               unsigned status, std::string_view detail) {
    metrics_.admin_action(action);
    // The identifier by its hash: a log line is no place for an address or a key.
    if (who)
        spdlog::info("admin: action={} kind={} id={} status={} peer={}{}{}", action, who->spec.text, who->hex(), status,
                     req.peer, detail.empty() ? "" : " ", detail);
    else
        spdlog::info("admin: action={} status={} peer={}{}{}", action, status, req.peer, detail.empty() ? "" : " ",
                     detail);
}

asio::awaitable<admin_reply> control_plane::handle(const admin_request& req) {
    using bhttp::verb;
    const bool read = req.method == verb::get || req.method == verb::head;
    if (req.path == "/overrides") {
        if (!read) co_return not_allowed("GET, HEAD");
        const bool fresh = co_await refresh(false);
        (void)fresh;  // else the list as last read
        auto reply = overrides_list();
        log_action("list_overrides", nullptr, req, reply.status);
        co_return reply;
    }
    // /identities/<kind>/<value>[/block] or /overrides/<kind>/<value>
    const bool overrides = req.path.starts_with("/overrides/");
    std::string_view rest = req.path.substr(overrides ? 11 : 12);
    const auto slash = rest.find('/');
    std::string_view kind_text = rest.substr(0, slash), value;
    if (slash != std::string_view::npos) value = rest.substr(slash + 1);
    bool block_path = false;
    if (!overrides && value.ends_with("/block")) {
        value.remove_suffix(6);
        block_path = true;
    }
    // The action by path and method; "other" for a method the path does not take.
    const bool del = req.method == verb::delete_;
    std::string_view action = "other";
    if (overrides && (req.method == verb::put || del)) action = del ? "end_override" : "override";
    if (block_path && (req.method == verb::post || del)) action = del ? "unblock" : "block";
    if (!overrides && !block_path && (read || del)) action = del ? "reset" : "get_identity";
    const auto refuse = [&](admin_reply r) {
        log_action(action, nullptr, req, r.status);
        return r;
    };
    if (overrides && req.method != verb::put && req.method != verb::delete_)
        co_return refuse(not_allowed("PUT, DELETE"));
    if (block_path && req.method != verb::post && req.method != verb::delete_)
        co_return refuse(not_allowed("POST, DELETE"));
    if (!overrides && !block_path && !read && req.method != verb::delete_)
        co_return refuse(not_allowed("GET, HEAD, DELETE"));
    if (kind_text.empty() || value.empty())
        co_return refuse(
            error_reply(404, "not_found", "expected /identities/<kind>/<value> or /overrides/<kind>/<value>"));

    identity_ref who;
    std::string decoded;
    if (!identity::percent_decode(kind_text, decoded))
        co_return refuse(error_reply(400, "bad_kind", "the kind is not percent-encoded right"));
    auto parsed = identity::parse_kind_spec(decoded);
    if (!parsed.ok()) co_return refuse(error_reply(400, "bad_kind", parsed.error));
    who.spec = std::move(parsed.spec);
    who.snap = snapshot_();
    const bool limited = std::any_of(who.snap->policies.begin(), who.snap->policies.end(), [&](const auto& p) {
        if (who.spec.text == "ip") return !p.ip.empty();
        if (who.spec.text == "user") return !p.user.empty() || p.user_by_plan;
        return std::any_of(p.kinds.begin(), p.kinds.end(), [&](const auto& k) { return k.spec.text == who.spec.text; });
    });
    if (!limited) co_return refuse(error_reply(404, "unknown_kind", "no policy limits by " + who.spec.text));
    const auto id = identity::identifier_from_path(who.spec, value, who.snap->cfg->clients.ipv6_prefix);
    if (!id.ok()) co_return refuse(error_reply(400, "bad_value", id.error));
    who.id = hasher_.hash(who.spec.text, id.hash_input);
    who.kind = identity::kind_of(who.spec.text);  // known: a policy limits it

    admin_reply reply;
    // (No co_await in a conditional expression: GCC 12.)
    if (overrides && req.method == verb::put) {
        reply = co_await override_set(who, req.body);
    } else if (overrides) {
        reply = co_await override_end(who, req.query);
    } else if (block_path && req.method == verb::post) {
        reply = co_await block(who, req.query);
    } else if (block_path) {
        reply = co_await unblock(who);
    } else if (read) {
        reply = co_await identity_get(who);
    } else {
        reply = co_await identity_reset(who, req.query);
    }
    log_action(action, &who, req, reply.status);
    co_return reply;
}

asio::awaitable<admin_reply> control_plane::identity_get(const identity_ref& who) {
    const auto sets = tier_sets(who);
    std::vector<limit::tier> all;
    for (const auto& s : sets) all.insert(all.end(), s.tiers.begin(), s.tiers.end());
    const limit::store_key key{who.kind, who.id, all};
    limit::check_request r{std::span(&key, 1), 0};
    r.query = true;  // cost 0: the tiers as they stand
    const auto& w = next_worker();
    auto op = query_on(w.worker->store, r);
    const auto result = co_await on_worker(w, std::move(op));
    if (result.state != limit::check_result::status::ok || result.verdict.tiers.size() != all.size())
        co_return store_failed();
    const auto now = limit::unix_ms();
    boost::json::object o;
    o["kind"] = who.spec.text;
    o["id"] = who.hex();
    o["store"] = shared() ? "redis" : "memory";
    const auto* controlled = current_->find(who.kind, who.id);
    if (controlled && controlled->block_until_ms > now) {
        boost::json::object b;
        b["until_ms"] = controlled->block_until_ms;
        b["retry_after"] = (controlled->block_until_ms - now + 999) / 1000;
        o["blocked"] = std::move(b);
    } else {
        o["blocked"] = false;
    }
    if (const auto* plan = limit::control_step::plan_of(*current_, who.id, now);
        plan && who.kind == identity::kind::user)
        o["plan_override"] = *plan;
    boost::json::array policies;
    std::size_t at = 0;
    for (const auto& s : sets) {
        boost::json::object po;
        po["policy"] = s.policy;
        if (!s.plan.empty()) po["plan"] = s.plan;
        po["override"] = s.overridden;
        boost::json::array tiers;
        for (std::size_t i = 0; i < s.tiers.size(); ++i, ++at)
            tiers.push_back(tier_json(all[at], &result.verdict.tiers[at]));
        po["tiers"] = std::move(tiers);
        policies.push_back(std::move(po));
    }
    o["policies"] = std::move(policies);
    co_return json_reply(200, o);
}

asio::awaitable<admin_reply> control_plane::identity_reset(const identity_ref& who, std::string_view query) {
    const auto params = params_of(query);
    if (!params) co_return error_reply(400, "bad_request", "malformed query");
    std::string policy;
    std::vector<std::string> names;
    for (const auto& [k, v] : *params) {
        if (k == "policy" && policy.empty() && !v.empty()) {
            policy = v;
        } else if (k == "tier" && !v.empty()) {
            names.push_back(v);
        } else {
            co_return error_reply(400, "bad_request", "the parameters are policy (once) and tier (any number)");
        }
    }
    auto sets = tier_sets(who);
    if (!policy.empty()) {
        std::erase_if(sets, [&](const tier_set& s) { return s.policy != policy; });
        if (sets.empty())
            co_return error_reply(404, "unknown_policy", "no policy " + policy + " limits by " + who.spec.text);
    }
    std::vector<limit::tier> chosen;
    boost::json::array reset;
    for (const auto& s : sets) {
        boost::json::array tier_names;
        for (const auto& t : s.tiers) {
            if (!names.empty() && std::find(names.begin(), names.end(), t.name) == names.end()) continue;
            chosen.push_back(t);
            tier_names.emplace_back(t.name);
        }
        if (tier_names.empty()) continue;
        boost::json::object so;
        so["policy"] = s.policy;
        if (!s.plan.empty()) so["plan"] = s.plan;
        so["tiers"] = std::move(tier_names);
        reset.push_back(std::move(so));
    }
    for (const auto& n : names)
        if (std::none_of(chosen.begin(), chosen.end(), [&](const limit::tier& t) { return t.name == n; }))
            co_return unknown_tier(n, policy, who.spec.text);
    const limit::store_key key{who.kind, who.id, chosen};
    const limit::check_request r{std::span(&key, 1), 1};
    const auto& w = next_worker();
    auto op = reset_on(w.worker->store, r);
    const bool done = co_await on_worker(w, std::move(op));
    if (!done) co_return store_failed();
    // Every gateway drops its cached denials (a change of version).
    std::vector<std::string> touch{std::string("touch")};
    const bool told = co_await change(std::move(touch));
    (void)told;
    boost::json::object o;
    o["kind"] = who.spec.text;
    o["id"] = who.hex();
    o["reset"] = std::move(reset);
    co_return json_reply(200, o);
}

asio::awaitable<admin_reply> control_plane::block(const identity_ref& who, std::string_view query) {
    const auto params = params_of(query);
    std::optional<config::duration> span;
    if (params && params->size() == 1 && params->front().first == "for")
        span = config::parse_duration(params->front().second);
    if (!span) co_return error_reply(400, "bad_request", "expected ?for=<duration>, like 10m", "for");
    if (span->count() <= 0 || *span > max_block)
        co_return error_reply(400, "bad_request", "for: must be greater than 0 and at most 8784h", "for");
    limit::control_record rec;
    rec.what = limit::control_record::type::block;
    rec.kind = who.spec.text;
    rec.id = who.id;
    rec.at_ms = limit::unix_ms();
    rec.until_ms = rec.at_ms + span->count();
    std::vector<std::string> set{std::string("set"), rec.field(), rec.value()};
    const bool done = co_await change(std::move(set));
    if (!done) co_return store_failed();
    boost::json::object o;
    o["kind"] = who.spec.text;
    o["id"] = who.hex();
    o["blocked_until_ms"] = rec.until_ms;
    o["retry_after"] = (span->count() + 999) / 1000;
    co_return json_reply(200, o);
}

asio::awaitable<admin_reply> control_plane::unblock(const identity_ref& who) {
    const bool fresh = co_await refresh(false);
    if (!fresh) co_return store_failed();
    const auto field = limit::control_record::block_field(who.spec.text, who.id);
    if (!entries_.contains(field)) co_return error_reply(404, "not_blocked", "no block on this identifier");
    std::vector<std::string> del{std::string("del"), field};
    const bool done = co_await change(std::move(del));
    if (!done) co_return store_failed();
    boost::json::object o;
    o["kind"] = who.spec.text;
    o["id"] = who.hex();
    o["unblocked"] = true;
    co_return json_reply(200, o);
}

asio::awaitable<admin_reply> control_plane::override_set(const identity_ref& who, std::string_view body) {
    boost::system::error_code ec;
    auto json = boost::json::parse(body, ec);
    if (ec) co_return error_reply(400, "bad_json", "the body is not JSON: " + ec.message());
    if (!json.is_object()) co_return error_reply(400, "bad_json", "expected a JSON object");
    config::override_config o;
    try {
        o = config::read_override(std::string(body), "body", who.spec.text);
    } catch (const config::config_error& e) {
        const auto [field, reason] = field_and_reason(e.what());
        co_return error_reply(400, "bad_request", reason, field);
    }
    const auto& cfg = *who.snap->cfg;
    limit::control_record rec;
    rec.kind = who.spec.text;
    rec.id = who.id;
    if (!o.plan.empty()) {
        if (who.spec.text != "user")
            co_return error_reply(400, "bad_request", "plan: a plan applies to the kind user", "plan");
        if (!cfg.find_plan(o.plan)) co_return error_reply(400, "bad_request", "plan: no plan named " + o.plan, "plan");
        rec.what = limit::control_record::type::override_plan;
        rec.plan = o.plan;
    } else {
        const auto& policies = who.snap->policies;
        const auto p =
            std::find_if(policies.begin(), policies.end(), [&](const auto& x) { return x.name == o.policy; });
        if (p == policies.end())
            co_return error_reply(400, "bad_request", "policy: no policy named " + o.policy, "policy");
        const auto sets = tier_sets(who);
        if (std::none_of(sets.begin(), sets.end(), [&](const tier_set& s) { return s.policy == o.policy; }))
            co_return error_reply(400, "bad_request", "policy: " + o.policy + " does not limit by " + who.spec.text,
                                  "policy");
        for (std::size_t i = 0; i < o.tiers.size(); ++i) {
            const auto& t = o.tiers[i];
            const std::string at = "tiers[" + std::to_string(i) + "]";
            if (p->count_rejected && t.algo == config::algorithm::log)
                co_return error_reply(400, "bad_request",
                                      at + ".algorithm: the policy has count_rejected, which cannot apply to log "
                                           "tiers (a log would keep every refused request)",
                                      at + ".algorithm");
            if (t.algo == config::algorithm::concurrency) continue;
            const std::int64_t room = t.algo == config::algorithm::gcra ? std::min(t.limit, t.burst) : t.limit;
            for (const auto& route : cfg.routes) {
                if (route.policy != o.policy) continue;
                const std::int64_t cost = std::max(route.cost, route.max_cost);
                if (cost > room)
                    co_return error_reply(400, "bad_request",
                                          at + ".limit: below the cost " + std::to_string(cost) + " of route " +
                                              route.name + ": no request of it could pass",
                                          at + ".limit");
            }
        }
        rec.what = limit::control_record::type::override_tiers;
        rec.policy = o.policy;
        rec.tiers = boost::json::serialize(json.as_object().at("tiers"));
    }
    rec.at_ms = limit::unix_ms();
    rec.until_ms = rec.at_ms + std::chrono::duration_cast<std::chrono::milliseconds>(o.expires_in).count();
    std::vector<std::string> set{std::string("set"), rec.field(), rec.value()};
    const bool done = co_await change(std::move(set));
    if (!done) co_return store_failed();
    boost::json::object out;
    out["kind"] = who.spec.text;
    out["id"] = who.hex();
    if (rec.what == limit::control_record::type::override_plan) {
        out["plan"] = rec.plan;
    } else {
        out["policy"] = rec.policy;
        out["tiers"] = parsed_or_text(rec.tiers);
    }
    out["until_ms"] = rec.until_ms;
    co_return json_reply(200, out);
}

asio::awaitable<admin_reply> control_plane::override_end(const identity_ref& who, std::string_view query) {
    const auto params = params_of(query);
    std::string policy;
    if (!params || params->size() > 1 || (params->size() == 1 && params->front().first != "policy"))
        co_return error_reply(400, "bad_request", "the only parameter is policy");
    if (params->size() == 1) policy = params->front().second;
    const bool fresh = co_await refresh(false);
    if (!fresh) co_return store_failed();
    std::vector<std::string> del{std::string("del")};
    for (const auto& [f, v] : entries_) {
        const auto r = limit::control_record::parse(f, v);
        if (!r || r->what == limit::control_record::type::block || r->kind != who.spec.text || r->id != who.id)
            continue;
        if (!policy.empty() && r->policy != policy) continue;
        del.push_back(f);
    }
    if (del.size() == 1) co_return no_override(policy);
    const bool done = co_await change(del);
    if (!done) co_return store_failed();
    boost::json::object o;
    o["kind"] = who.spec.text;
    o["id"] = who.hex();
    o["ended"] = del.size() - 1;
    co_return json_reply(200, o);
}

admin_reply control_plane::overrides_list() const {
    const auto now = limit::unix_ms();
    boost::json::array overrides, blocks;
    for (const auto& r : current_->records()) {
        if (r.until_ms <= now) continue;
        boost::json::object o;
        o["kind"] = r.kind;
        o["id"] = identity::hasher::to_hex(r.id);
        if (r.what == limit::control_record::type::override_plan) o["plan"] = r.plan;
        if (r.what == limit::control_record::type::override_tiers) {
            o["policy"] = r.policy;
            o["tiers"] = parsed_or_text(r.tiers);
        }
        o["set_at_ms"] = r.at_ms;
        o["until_ms"] = r.until_ms;
        o["expires_in"] = (r.until_ms - now + 999) / 1000;
        (r.what == limit::control_record::type::block ? blocks : overrides).push_back(std::move(o));
    }
    boost::json::object o;
    o["overrides"] = std::move(overrides);
    o["blocks"] = std::move(blocks);
    o["store"] = shared() ? "redis" : "memory";
    return json_reply(200, o);
}

}  // namespace sluice::app
