#include "store/redis_admin.hpp"

#include "store/redis_pipeline.hpp"
#include "store/redis_script.hpp"

namespace sluice::store::redis_admin {

std::string format_reset(std::string_view sha, std::string_view key_prefix, const limit::store_key& k) {
    std::vector<std::string> argv{"EVALSHA", std::string(sha), "", redis_script::key_name(key_prefix, k)};
    for (const auto& t : k.tiers)
        if (t.algo == config::algorithm::log) argv.push_back(redis_script::log_key_name(key_prefix, k, t));
    argv[2] = std::to_string(argv.size() - 3);
    argv.emplace_back();
    argv.emplace_back("reset");
    for (const auto& t : k.tiers) argv.push_back(t.id);
    return format_command(argv);
}

std::string controls_key(std::string_view key_prefix) {
    std::string key(key_prefix);
    key += "{sluice:controls}";
    return key;
}

std::string format_control(std::string_view sha, std::string_view key_prefix, std::span<const std::string> args) {
    std::vector<std::string> argv{"EVALSHA", std::string(sha), "1", controls_key(key_prefix), "", "control"};
    argv.insert(argv.end(), args.begin(), args.end());
    return format_command(argv);
}

std::optional<control_reply> parse_control(const redisReply* reply) {
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements == 0) return {};
    const redisReply* v = reply->element[0];
    if (!v || v->type != REDIS_REPLY_INTEGER) return {};
    control_reply out;
    out.version = v->integer;
    if (reply->elements == 1) return out;
    const redisReply* mark = reply->element[1];
    if (reply->elements % 2 != 0 || !mark || mark->type != REDIS_REPLY_STRING ||
        std::string_view(mark->str, mark->len) != "*")
        return {};
    out.changed = true;
    for (std::size_t i = 2; i + 1 < reply->elements; i += 2) {
        const redisReply* f = reply->element[i];
        const redisReply* x = reply->element[i + 1];
        if (!f || !x || f->type != REDIS_REPLY_STRING || x->type != REDIS_REPLY_STRING) return {};
        out.entries.emplace_back(std::string(f->str, f->len), std::string(x->str, x->len));
    }
    return out;
}

}  // namespace sluice::store::redis_admin
