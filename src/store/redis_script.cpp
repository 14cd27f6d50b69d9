#include "store/redis_script.hpp"

#include "base/text.hpp"

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <charconv>
#include <utility>

namespace sluice::store::redis_script {

namespace {

char algorithm_code(const limit::tier& t) {
    switch (t.algo) {
        case config::algorithm::fixed: return t.month ? 'm' : 'f';
        case config::algorithm::sliding: return 's';
        case config::algorithm::gcra: return 'g';
        case config::algorithm::log: return 'l';
        case config::algorithm::concurrency: return 'c';
    }
    return '?';
}

void append_int(std::vector<std::string>& argv, std::int64_t v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    (void)ec;
    argv.emplace_back(buf, end);
}

// "EVALSHA", the script's SHA and a placeholder for numkeys; returns the placeholder's index.
std::size_t begin_call(std::vector<std::string>& argv, std::string_view sha) {
    argv.emplace_back("EVALSHA");
    argv.emplace_back(sha);
    argv.emplace_back();
    return argv.size() - 1;
}

// ARGV[1]: the time override, "" in production (the script reads TIME).
void append_time(std::vector<std::string>& argv, std::optional<limit::usec> now_override) {
    if (now_override)
        append_int(argv, *now_override);
    else
        argv.emplace_back();
}

}  // namespace

limit::check_result failure(std::string message) {
    limit::check_result res;
    res.state = limit::check_result::status::error;
    res.error = std::move(message);
    return res;
}

std::string key_name(std::string_view key_prefix, const limit::store_key& k) {
    std::string name;
    name.reserve(key_prefix.size() + 8 + 2 * k.id.size());
    name.append(key_prefix);
    name += '{';
    name += identity::to_string(k.kind);
    name += ':';
    base::append_hex(name, k.id);
    name += '}';
    return name;
}

std::string log_key_name(std::string_view key_prefix, const limit::store_key& k, const limit::tier& t) {
    std::string name = key_name(key_prefix, k);
    name += ":log:";
    name += t.id;
    return name;
}

namespace {

// Where a check's arguments go, in order: `count` first (how many), then each one.
struct argv_sink {
    std::vector<std::string>& argv;
    void count(std::size_t n) { argv.reserve(argv.size() + n); }
    void arg(std::string_view a) { argv.emplace_back(a); }
    void number(std::int64_t v) { append_int(argv, v); }
};

// RESP, as redisFormatCommandArgv writes it, without its printf and a string per argument.
struct resp_sink {
    std::string& out;
    void length(char type, std::size_t n) {
        char buf[24];
        buf[0] = type;
        auto [end, ec] = std::to_chars(buf + 1, buf + sizeof buf - 2, n);
        (void)ec;
        *end++ = '\r';
        *end++ = '\n';
        out.append(buf, static_cast<std::size_t>(end - buf));
    }
    void count(std::size_t n) { length('*', n); }
    void arg(std::string_view a) {
        length('$', a.size());
        out.append(a.data(), a.size());
        out.append("\r\n", 2);
    }
    void number(std::int64_t v) {
        char buf[24];
        auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
        (void)ec;
        arg(std::string_view(buf, static_cast<std::size_t>(end - buf)));
    }
};

// How many KEYS a request has (its HASHes and log ZSETs), and how many ARGV its part takes:
// cost, number of identifiers, then per identifier its tier count and 11 per tier.
std::pair<std::size_t, std::size_t> call_size(const limit::check_request& r) {
    std::size_t numkeys = 0, tiers = 0;
    for (const auto& k : r.keys) {
        numkeys += 1 + static_cast<std::size_t>(std::count_if(k.tiers.begin(), k.tiers.end(), [](const limit::tier& t) {
                       return t.algo == config::algorithm::log;
                   }));
        tiers += k.tiers.size();
    }
    return {numkeys, 2 + r.keys.size() + 11 * tiers};
}

template <class Sink>
void emit_keys(Sink& out, std::string_view key_prefix, const limit::check_request& r) {
    for (const auto& k : r.keys) {
        out.arg(key_name(key_prefix, k));
        for (const auto& t : k.tiers)
            if (t.algo == config::algorithm::log) out.arg(log_key_name(key_prefix, k, t));
    }
}

template <class Sink>
void emit_time(Sink& out, std::optional<limit::usec> now_override) {
    if (now_override)
        out.number(*now_override);
    else
        out.arg("");  // ARGV[1]: the script reads TIME
}

// One identifier's part: its tier count, then 11 values per tier.
template <class Sink>
void emit_tiers(Sink& out, const limit::store_key& k, std::uint64_t lease) {
    out.number(static_cast<std::int64_t>(k.tiers.size()));
    for (const auto& t : k.tiers) {
        const char code = algorithm_code(t);
        out.arg(std::string_view(&code, 1));
        out.number(t.limit);
        out.number(t.per);
        out.number(t.bucket);
        out.number(t.buckets);
        switch (t.algo) {
            case config::algorithm::fixed: out.number(t.offset); break;
            case config::algorithm::concurrency: out.number(static_cast<std::int64_t>(lease)); break;
            default: out.number(t.burst); break;
        }
        out.number(t.interval);
        out.number(t.tolerance);
        out.number(t.min_interval);
        out.number(t.horizon);
        out.arg(t.id);
    }
}

template <class Sink>
void emit_request(Sink& out, const limit::check_request& r) {
    out.number(r.cost);
    out.number(static_cast<std::int64_t>(r.keys.size()));
    for (const auto& k : r.keys) emit_tiers(out, k, r.lease);
}

// A request's flag beyond `flag`: "" for none.
std::string_view flag_of(const limit::check_request& r, call_flag flag) {
    if (flag == call_flag::query) return "q";
    if (r.want_receipt) return r.count_rejected ? "U" : "u";
    return r.count_rejected ? "p" : "";
}

template <class Sink>
void emit_call(Sink& out, std::string_view sha, std::string_view key_prefix, const limit::check_request& r,
               std::optional<limit::usec> now_override, call_flag flag) {
    const auto [numkeys, args] = call_size(r);
    const std::string_view flag_arg = flag_of(r, flag);
    out.count(3 + numkeys + 1 + args + (flag_arg.empty() ? 0 : 1));
    out.arg("EVALSHA");
    out.arg(sha);
    out.number(static_cast<std::int64_t>(numkeys));
    emit_keys(out, key_prefix, r);
    emit_time(out, now_override);
    emit_request(out, r);
    if (!flag_arg.empty()) out.arg(flag_arg);
}

// How a batch sends a request, given the one before it: in full; laid out the same (the same
// kinds of identifiers with the same tiers, cost, flag and lease) as "~", its keys but not its
// arguments; or the same identifiers too, as "=", neither.
enum class form { full, same_layout, same };

form form_of(const limit::check_request& r, const limit::check_request* before) {
    if (!before || r.cost != before->cost || r.count_rejected != before->count_rejected ||
        r.want_receipt != before->want_receipt || r.lease != before->lease || r.keys.size() != before->keys.size())
        return form::full;
    bool same_ids = true;
    for (std::size_t i = 0; i < r.keys.size(); ++i) {
        const auto &a = r.keys[i], &b = before->keys[i];
        if (a.kind != b.kind || a.tiers.data() != b.tiers.data() || a.tiers.size() != b.tiers.size()) return form::full;
        same_ids = same_ids && a.id == b.id;
    }
    return same_ids ? form::same : form::same_layout;
}

template <class Sink>
void emit_batch(Sink& out, std::string_view sha, std::string_view key_prefix,
                std::span<const limit::check_request* const> rs, std::optional<limit::usec> now_override) {
    boost::container::small_vector<form, 64> forms;  // (64: the store's largest batch)
    forms.reserve(rs.size());
    for (std::size_t i = 0; i < rs.size(); ++i) forms.push_back(form_of(*rs[i], i > 0 ? rs[i - 1] : nullptr));
    std::size_t numkeys = 0, args = 0;
    for (std::size_t i = 0; i < rs.size(); ++i) {
        const form f = forms[i];
        const auto [keys, n] = f == form::same ? std::pair<std::size_t, std::size_t>{0, 0} : call_size(*rs[i]);
        numkeys += keys;
        args += 1 + (f == form::full ? n : 0);  // its flag, then its part
    }
    out.count(3 + numkeys + 3 + args);
    out.arg("EVALSHA");
    out.arg(sha);
    out.number(static_cast<std::int64_t>(numkeys));
    for (std::size_t i = 0; i < rs.size(); ++i)
        if (forms[i] != form::same) emit_keys(out, key_prefix, *rs[i]);
    emit_time(out, now_override);
    out.arg("batch");
    out.number(static_cast<std::int64_t>(rs.size()));
    for (std::size_t i = 0; i < rs.size(); ++i) {
        switch (forms[i]) {
            case form::same: out.arg("="); break;
            case form::same_layout: out.arg("~"); break;
            case form::full: {
                const auto flag = flag_of(*rs[i], call_flag::none);
                out.arg(flag.empty() ? "-" : flag);
                emit_request(out, *rs[i]);
                break;
            }
        }
    }
}

}  // namespace

void build_call(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                const limit::check_request& r, std::optional<limit::usec> now_override, call_flag flag) {
    argv_sink out{argv};
    emit_call(out, sha, key_prefix, r, now_override, flag);
}

std::string format_call(std::string_view sha, std::string_view key_prefix, const limit::check_request& r,
                        std::optional<limit::usec> now_override, call_flag flag) {
    std::string text;
    text.reserve(256 + 96 * r.keys.size() + 128 * (r.keys.empty() ? 0 : r.keys[0].tiers.size()));
    resp_sink out{text};
    emit_call(out, sha, key_prefix, r, now_override, flag);
    return text;
}

std::string format_batch(std::string_view sha, std::string_view key_prefix,
                         std::span<const limit::check_request* const> rs, std::optional<limit::usec> now_override) {
    std::string text;
    text.reserve(256 + 384 * rs.size());
    resp_sink out{text};
    emit_batch(out, sha, key_prefix, rs, now_override);
    return text;
}

void build_batch(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                 std::span<const limit::check_request* const> rs, std::optional<limit::usec> now_override) {
    argv_sink out{argv};
    emit_batch(out, sha, key_prefix, rs, now_override);
}

namespace {

template <class Sink>
void emit_take_back(Sink& out, std::string_view sha, std::string_view key_prefix, const limit::check_request& r,
                    const limit::receipt& rc, std::int64_t amount, std::optional<limit::usec> now_override) {
    const auto [numkeys, args] = call_size(r);
    out.count(3 + numkeys + 1 + 1 + args + 1 + r.keys.size());  // (args: cost and count; amount, whole, count here)
    out.arg("EVALSHA");
    out.arg(sha);
    out.number(static_cast<std::int64_t>(numkeys));
    emit_keys(out, key_prefix, r);
    emit_time(out, now_override);
    out.arg("undo");
    out.number(amount);
    out.arg(amount >= r.cost ? "1" : "0");
    out.number(static_cast<std::int64_t>(r.keys.size()));
    for (std::size_t i = 0; i < r.keys.size(); ++i) {
        out.number(i < rc.at.size() ? rc.at[i] : 0);
        emit_tiers(out, r.keys[i], r.lease);
    }
}

}  // namespace

std::string format_take_back(std::string_view sha, std::string_view key_prefix, const limit::check_request& r,
                             const limit::receipt& rc, std::int64_t amount, std::optional<limit::usec> now_override) {
    std::string text;
    resp_sink out{text};
    emit_take_back(out, sha, key_prefix, r, rc, amount, now_override);
    return text;
}

void build_take_back(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                     const limit::check_request& r, const limit::receipt& rc, std::int64_t amount,
                     std::optional<limit::usec> now_override) {
    argv_sink out{argv};
    emit_take_back(out, sha, key_prefix, r, rc, amount, now_override);
}

bool build_lease(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                 const limit::check_request& r, limit::lease_change change, std::optional<limit::usec> now_override) {
    const auto leased = [](const limit::tier& t) { return t.algo == config::algorithm::concurrency; };
    const std::size_t numkeys_at = begin_call(argv, sha);
    std::size_t numkeys = 0;
    for (const auto& k : r.keys) {
        if (std::none_of(k.tiers.begin(), k.tiers.end(), leased)) continue;
        argv.push_back(key_name(key_prefix, k));
        ++numkeys;
    }
    argv[numkeys_at] = std::to_string(numkeys);
    append_time(argv, now_override);
    argv.emplace_back(change == limit::lease_change::release ? "release" : "renew");
    append_int(argv, static_cast<std::int64_t>(r.lease));
    for (const auto& k : r.keys) {
        const auto n = std::count_if(k.tiers.begin(), k.tiers.end(), leased);
        if (n == 0) continue;
        append_int(argv, n);
        for (const auto& t : k.tiers) {
            if (!leased(t)) continue;
            argv.push_back(t.id);
            append_int(argv, t.per);
        }
    }
    return numkeys > 0;
}

limit::check_result parse_reply(const redisReply* reply, const limit::check_request& r) {
    if (!reply) return failure("no reply");
    if (reply->type == REDIS_REPLY_ERROR) {
        std::string_view msg(reply->str ? reply->str : "", reply->str ? reply->len : 0);
        if (msg.size() > 200) msg = msg.substr(0, 200);
        return failure(msg.empty() ? std::string("error reply") : std::string(msg));
    }
    if (reply->type != REDIS_REPLY_ARRAY) return failure("malformed reply: not an array");
    std::size_t tier_count = 0;
    for (const auto& k : r.keys) tier_count += k.tiers.size();
    const std::size_t decided = 2 + 3 * tier_count;
    if (reply->elements < decided) return failure("malformed reply: wrong length");
    for (std::size_t i = 0; i < decided; ++i)
        if (!reply->element[i] || reply->element[i]->type != REDIS_REPLY_INTEGER)
            return failure("malformed reply: not an integer");
    auto at = [&](std::size_t i) { return reply->element[i]->integer; };
    auto is_flag = [](long long v) { return v == 0 || v == 1; };
    if (!is_flag(at(0)) || at(1) < 0) return failure("malformed reply: bad verdict");

    limit::check_result res;
    res.verdict.allowed = at(0) == 1;
    res.verdict.retry_after = at(1);
    res.verdict.tiers.reserve(tier_count);
    std::size_t e = 2;
    for (std::size_t k = 0; k < r.keys.size(); ++k) {
        for (const auto& t : r.keys[k].tiers) {
            if (!is_flag(at(e + 2))) return failure("malformed reply: bad tier flag");
            res.verdict.tiers.push_back({&t, k, at(e), at(e + 1), at(e + 2) == 1});
            e += 3;
        }
    }
    // The receipt: per identifier the instant its commit used.
    const bool receipt = r.want_receipt && res.verdict.allowed;
    if (reply->elements != decided + (receipt ? r.keys.size() : 0)) return failure("malformed reply: wrong length");
    if (receipt) {
        res.taken.at.reserve(r.keys.size());
        for (std::size_t i = decided; i < reply->elements; ++i) {
            if (!reply->element[i] || reply->element[i]->type != REDIS_REPLY_INTEGER)
                return failure("malformed reply: receipt not an integer");
            res.taken.at.push_back(at(i));
        }
    }
    return res;
}

void parse_batch_reply(const redisReply* reply, std::span<const limit::check_request* const> rs,
                       std::vector<limit::check_result>& out) {
    out.clear();
    out.reserve(rs.size());
    const bool listed = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == rs.size();
    for (std::size_t i = 0; i < rs.size(); ++i) {
        if (listed)
            out.push_back(parse_reply(reply->element[i], *rs[i]));
        else if (reply && reply->type == REDIS_REPLY_ERROR)
            out.push_back(parse_reply(reply, *rs[i]));  // the script refused the batch
        else
            out.push_back(failure("malformed reply: not a list of the batch's replies"));
    }
}

}  // namespace sluice::store::redis_script
