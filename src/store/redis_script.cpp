#include "store/redis_script.hpp"

#include <algorithm>
#include <charconv>

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
    static constexpr char hex[] = "0123456789abcdef";
    std::string name;
    name.reserve(key_prefix.size() + 8 + 2 * k.id.size());
    name.append(key_prefix);
    name += '{';
    switch (k.kind) {
        case 'i': name += "ip"; break;
        case 'u': name += "user"; break;
        default: name += k.kind; break;
    }
    name += ':';
    for (std::uint8_t b : k.id) {
        name += hex[b >> 4];
        name += hex[b & 0xf];
    }
    name += '}';
    return name;
}

std::string log_key_name(std::string_view key_prefix, const limit::store_key& k, const limit::tier& t) {
    std::string name = key_name(key_prefix, k);
    name += ":log:";
    name += t.id;
    return name;
}

void build_call(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                const limit::check_request& r, std::optional<limit::usec> now_override, call_flag flag) {
    const std::size_t numkeys_at = begin_call(argv, sha);
    std::size_t numkeys = 0;
    for (const auto& k : r.keys) {
        argv.push_back(key_name(key_prefix, k));
        ++numkeys;
        for (const auto& t : k.tiers) {
            if (t.algo != config::algorithm::log) continue;
            argv.push_back(log_key_name(key_prefix, k, t));
            ++numkeys;
        }
    }
    argv[numkeys_at] = std::to_string(numkeys);
    append_time(argv, now_override);
    append_int(argv, r.cost);
    append_int(argv, static_cast<std::int64_t>(r.keys.size()));
    for (const auto& k : r.keys) {
        append_int(argv, static_cast<std::int64_t>(k.tiers.size()));
        for (const auto& t : k.tiers) {
            argv.emplace_back(1, algorithm_code(t));
            append_int(argv, t.limit);
            append_int(argv, t.per);
            append_int(argv, t.bucket);
            append_int(argv, t.buckets);
            switch (t.algo) {
                case config::algorithm::fixed: append_int(argv, t.offset); break;
                case config::algorithm::concurrency: append_int(argv, static_cast<std::int64_t>(r.lease)); break;
                default: append_int(argv, t.burst); break;
            }
            append_int(argv, t.interval);
            append_int(argv, t.tolerance);
            append_int(argv, t.min_interval);
            append_int(argv, t.horizon);
            argv.push_back(t.id);
        }
    }
    switch (flag) {
        case call_flag::none:
            if (r.count_rejected) argv.emplace_back("p");
            break;
        case call_flag::undo: argv.emplace_back("u"); break;
        case call_flag::query: argv.emplace_back("q"); break;
    }
}

void build_undo(std::vector<std::string>& argv, std::string_view sha, std::string_view key_prefix,
                const limit::store_key& k, std::int64_t cost, const undo_record& u) {
    const std::size_t numkeys_at = begin_call(argv, sha);
    argv.push_back(key_name(key_prefix, k));
    std::size_t numkeys = 1;
    for (const auto& t : k.tiers) {
        if (t.algo != config::algorithm::log) continue;
        argv.push_back(log_key_name(key_prefix, k, t));
        ++numkeys;
    }
    argv[numkeys_at] = std::to_string(numkeys);
    argv.emplace_back();
    argv.emplace_back("undo");
    append_int(argv, cost);
    argv.push_back(u.t_before);
    argv.push_back(u.t_after);
    for (std::size_t i = 0; i < k.tiers.size() && i < u.tiers.size(); ++i) {
        argv.push_back(k.tiers[i].id);
        argv.push_back(u.tiers[i].before);
        argv.push_back(u.tiers[i].after);
        argv.push_back(k.tiers[i].algo == config::algorithm::log ? u.tiers[i].log_seq : std::string());
    }
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

limit::check_result parse_reply(const redisReply* reply, const limit::check_request& r, undo_record* undo) {
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
    const std::size_t recorded = undo && res.verdict.allowed ? 2 + 3 * tier_count : 0;
    if (reply->elements != decided + recorded) return failure("malformed reply: wrong length");
    if (recorded) {
        if (r.keys.size() != 1) return failure("malformed reply: undo record of several identifiers");
        for (std::size_t i = decided; i < reply->elements; ++i)
            if (!reply->element[i] || reply->element[i]->type != REDIS_REPLY_STRING)
                return failure("malformed reply: undo record not a string");
        auto str = [&](std::size_t i) { return std::string(reply->element[i]->str, reply->element[i]->len); };
        undo->t_before = str(decided);
        undo->t_after = str(decided + 1);
        undo->tiers.clear();
        for (std::size_t i = decided + 2; i < reply->elements; i += 3)
            undo->tiers.push_back({str(i), str(i + 1), str(i + 2)});
    }
    return res;
}

bool is_noscript(const redisReply* reply) {
    if (!reply || reply->type != REDIS_REPLY_ERROR || !reply->str) return false;
    return std::string_view(reply->str, reply->len).starts_with("NOSCRIPT");
}

}  // namespace sluice::store::redis_script
