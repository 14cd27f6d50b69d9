#include "store/cluster_slots.hpp"

#include <charconv>

namespace sluice::store::cluster {

namespace {

std::uint16_t crc16(std::string_view s) {
    std::uint16_t crc = 0;
    for (unsigned char c : s) {
        crc ^= static_cast<std::uint16_t>(c << 8);
        for (int i = 0; i < 8; ++i) crc = static_cast<std::uint16_t>(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

template <class T>
std::optional<T> to_number(std::string_view s) {
    T v{};
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

std::string_view text(const redisReply* r) {
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_ERROR) ||
        !r->str)
        return {};
    return {r->str, r->len};
}

// "host:port", the host possibly an IPv6 address (the last ':' separates the port).
std::optional<config::host_port> parse_address(std::string_view s) {
    const auto colon = s.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    auto port = to_number<std::uint16_t>(s.substr(colon + 1));
    if (!port || *port == 0) return std::nullopt;
    std::string_view host = s.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    return config::host_port{std::string(host), *port};
}

}  // namespace

std::uint16_t key_slot(std::string_view key) {
    if (auto open = key.find('{'); open != std::string_view::npos) {
        auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
    }
    return static_cast<std::uint16_t>(crc16(key) % slot_count);
}

std::optional<std::vector<slot_range>> parse_slots(const redisReply* reply, std::string_view fallback_host) {
    if (!reply || reply->type != REDIS_REPLY_ARRAY) return std::nullopt;
    std::vector<slot_range> out;
    for (std::size_t i = 0; i < reply->elements; ++i) {
        const redisReply* e = reply->element[i];
        if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 3) return std::nullopt;
        const redisReply* node = e->element[2];
        if (e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
            node->type != REDIS_REPLY_ARRAY || node->elements < 2 || node->element[1]->type != REDIS_REPLY_INTEGER)
            return std::nullopt;
        const long long first = e->element[0]->integer, last = e->element[1]->integer;
        const long long port = node->element[1]->integer;
        if (first < 0 || last < first || last >= static_cast<long long>(slot_count) || port <= 0 || port > 65535)
            return std::nullopt;
        std::string_view host = text(node->element[0]);
        if (host.empty() || host == "?") host = fallback_host;
        out.push_back({static_cast<std::uint16_t>(first),
                       static_cast<std::uint16_t>(last),
                       {std::string(host), static_cast<std::uint16_t>(port)}});
    }
    return out;
}

std::optional<redirect> parse_redirect(const redisReply* reply) {
    if (!reply || reply->type != REDIS_REPLY_ERROR) return std::nullopt;
    std::string_view s = text(reply);
    redirect out;
    if (s.starts_with("MOVED ")) {
        out.what = redirect::kind::moved;
        s.remove_prefix(6);
    } else if (s.starts_with("ASK ")) {
        out.what = redirect::kind::ask;
        s.remove_prefix(4);
    } else {
        return std::nullopt;
    }
    const auto space = s.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    auto slot = to_number<std::uint16_t>(s.substr(0, space));
    auto target = parse_address(s.substr(space + 1));
    if (!slot || *slot >= slot_count || !target) return std::nullopt;
    out.slot = *slot;
    out.target = std::move(*target);
    return out;
}

}  // namespace sluice::store::cluster
