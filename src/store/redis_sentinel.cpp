#include "store/redis_sentinel.hpp"

#include "base/async.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <charconv>
#include <vector>

namespace sluice::store {

namespace asio = boost::asio;
using asio::awaitable;

namespace sentinel {

namespace {

std::optional<std::uint16_t> parse_port(std::string_view text) {
    unsigned port = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (ec != std::errc() || end != text.data() + text.size() || port == 0 || port > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(port);
}

std::string_view text_of(const redisReply* r) { return {r->str, r->len}; }

}  // namespace

std::optional<config::host_port> parse_master_addr(const redisReply* r) {
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return std::nullopt;
    auto port = parse_port(text_of(r->element[1]));
    if (!port) return std::nullopt;
    return config::host_port{std::string(text_of(r->element[0])), *port};
}

std::optional<config::host_port> parse_switch(std::string_view text, std::string_view master) {
    std::vector<std::string_view> words;
    for (std::size_t at = 0; at <= text.size();) {
        auto end = std::min(text.find(' ', at), text.size());
        words.push_back(text.substr(at, end - at));
        at = end + 1;
    }
    if (words.size() != 5 || words[0] != master) return std::nullopt;
    auto port = parse_port(words[4]);
    if (!port) return std::nullopt;
    return config::host_port{std::string(words[3]), *port};
}

std::optional<config::host_port> parse_switch_message(const redisReply* r, std::string_view master) {
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        text_of(r->element[0]) != "message" || r->element[2]->type != REDIS_REPLY_STRING)
        return std::nullopt;
    return parse_switch(text_of(r->element[2]), master);
}

}  // namespace sentinel

namespace {

using base::use_tuple;

// Outside the coroutines: GCC 12 mishandles a braced list of literals inside one.
std::string subscribe_command() { return format_command({"SUBSCRIBE", "+switch-master"}); }
std::string ask_command(const std::string& master) {
    return format_command({"SENTINEL", "get-master-addr-by-name", master});
}

}  // namespace

redis_sentinel::redis_sentinel(const asio::any_io_executor& ex, const redis_connection_options& o)
    : opts_(o), ask_(ex, o), watch_(ex, o), pause_(ex) {}

void redis_sentinel::stop() {
    stopped_ = true;
    pause_.cancel();
    ask_.close();
    watch_.close();
}

void redis_sentinel::note_failure(const std::string& what) {
    if (what == last_failure_) {
        spdlog::debug("redis: {}", what);
        return;
    }
    last_failure_ = what;
    spdlog::warn("redis: {}", what);
}

awaitable<std::optional<config::host_port>> redis_sentinel::find_primary(config::host_port current) {
    for (const auto& s : opts_.sentinels) {
        if (stopped_) co_return std::nullopt;
        auto reply = co_await ask_.ask_once(s, ask_command(opts_.sentinel_master));
        if (!reply) continue;
        if (auto primary = sentinel::parse_master_addr(reply.get())) {
            if (*primary != current)
                spdlog::info("redis: sentinel {}:{} names {}:{} as the primary of {}", s.host, s.port, primary->host,
                             primary->port, opts_.sentinel_master);
            last_failure_.clear();
            co_return primary;
        }
        note_failure("sentinel " + s.host + ":" + std::to_string(s.port) + " names no primary for " +
                     opts_.sentinel_master);
    }
    if (!stopped_) note_failure("no sentinel answered with the primary of " + opts_.sentinel_master);
    co_return std::nullopt;
}

awaitable<void> redis_sentinel::watch(std::function<void(config::host_port)> on_switch) {
    for (std::size_t next = 0; !stopped_; ++next) {
        const auto& s = opts_.sentinels[next % opts_.sentinels.size()];
        asio::steady_timer timer(pause_.get_executor(), opts_.connect_timeout);
        auto ec = co_await watch_.open(s.host, s.port, timer);
        if (!ec && !stopped_) {
            const std::string subscribe = subscribe_command();
            auto [wec, n] = co_await watch_.write_all(asio::buffer(subscribe));
            (void)n;
            if (!wec && !stopped_) co_await read_switches(on_switch);
        }
        watch_.reset();
        if (stopped_) break;
        pause_.expires_after(opts_.backoff_max);
        auto [tec] = co_await pause_.async_wait(use_tuple);
        (void)tec;  // cancelled by stop()
    }
}

awaitable<void> redis_sentinel::read_switches(const std::function<void(config::host_port)>& on_switch) {
    reply_reader reader;
    std::string buf(4096, '\0');
    while (!stopped_) {
        auto [ec, n] = co_await watch_.read_some(asio::buffer(buf));
        if (ec || stopped_ || !reader.feed(std::string_view(buf.data(), n))) co_return;
        for (;;) {
            reply_ptr r;
            auto st = reader.next(r);
            if (st == reply_reader::status::need_more) break;
            if (st == reply_reader::status::error) co_return;
            if (auto primary = sentinel::parse_switch_message(r.get(), opts_.sentinel_master)) {
                spdlog::info("redis: sentinels switched the primary of {} to {}:{}", opts_.sentinel_master,
                             primary->host, primary->port);
                on_switch(std::move(*primary));
            }
        }
    }
}

}  // namespace sluice::store
