#include "upstream/health.hpp"

#include "base/async.hpp"
#include "tls/client_context.hpp"
#include "tls/stream.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::upstream {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// A status line, or an interim head, is never longer than this in a sane answer.
constexpr std::size_t max_answer_bytes = 8192;

// One check of one server: its connection and its deadline.
struct check {
    check(asio::io_context& ioc, std::shared_ptr<server> srv)
        : s(std::move(srv)), stream(tcp::socket(ioc)), deadline(ioc) {}

    void cut() {
        error_code ignored;
        stream.socket().cancel(ignored);
    }

    std::shared_ptr<server> s;
    std::shared_ptr<tls::session_cache> cache;  // before `stream`, whose SSL may keep a session in it
    tls::stream stream;
    asio::steady_timer deadline;
    bool timed_out = false;
};

std::int64_t unix_ms_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The status of "HTTP/1.x NNN ...", or 0.
unsigned status_of(std::string_view line) {
    if (line.size() < 12 || !line.starts_with("HTTP/1.") || line[8] != ' ') return 0;
    unsigned status = 0;
    const auto* first = line.data() + 9;
    auto [end, ec] = std::from_chars(first, first + 3, status);
    if (ec != std::errc{} || end != first + 3 || status < 100 || status > 599) return 0;
    if (line.size() > 12 && line[12] != ' ') return 0;
    return status;
}

}  // namespace

struct health_checker::target {
    target(asio::io_context& ioc, std::shared_ptr<pool> of) : p(std::move(of)), timer(ioc) {}

    std::shared_ptr<pool> p;
    std::unique_ptr<const tls::client_context> tls;  // for its https servers (null: none, or tls_error)
    std::string tls_error;
    asio::steady_timer timer;
    clock::time_point due;
    bool stopped = false;
    std::map<const server*, std::shared_ptr<check>> running;
    std::map<const server*, std::shared_ptr<tls::session_cache>> sessions;  // so that handshakes resume
};

namespace {

using target = health_checker::target;

// Reads the answer up to its final status line: "" when the status is expected, else why not.
asio::awaitable<std::string> read_status(std::shared_ptr<check> c, std::shared_ptr<target> t) {
    const auto& expect = t->p->cfg().health.expect_status;
    std::string in;
    char buf[1024];
    for (;;) {
        auto [ec, n] = co_await c->stream.async_read_some(asio::buffer(buf), base::use_tuple);
        if (c->timed_out || t->stopped) co_return "timeout";
        in.append(buf, n);
        for (;;) {
            const auto eol = in.find("\r\n");
            if (eol == std::string::npos) break;
            const unsigned status = status_of(std::string_view(in).substr(0, eol));
            if (status == 0) co_return "not an HTTP answer";
            if (status >= 200 || status == 101) {
                if (expect.contains(status)) co_return "";
                co_return "status " + std::to_string(status);
            }
            // An interim answer (100, 103): the final one follows its head.
            const auto end = in.find("\r\n\r\n");
            if (end == std::string::npos) break;
            in.erase(0, end + 4);
        }
        if (in.size() > max_answer_bytes) co_return "not an HTTP answer";
        if (ec == asio::error::eof) co_return "closed before answering";
        if (ec) co_return "read failed: " + ec.message();
    }
}

// One check of c->s: "" when it passed, else why it failed.
asio::awaitable<std::string> probe(std::shared_ptr<check> c, std::shared_ptr<target> t) {
    const auto& h = t->p->cfg().health;
    const server& srv = *c->s;
    c->deadline.expires_after(h.timeout);
    c->deadline.async_wait([c](error_code ec) {
        if (ec) return;
        c->timed_out = true;
        c->cut();
    });
    auto [ec] = co_await c->stream.socket().async_connect(srv.endpoint, base::use_tuple);
    if (c->timed_out || t->stopped) co_return "timeout";
    if (ec == asio::error::connection_refused) co_return "connect refused";
    if (ec) co_return "connect failed: " + ec.message();
    if (srv.url.tls) {
        if (!t->tls) co_return "no TLS context: " + t->tls_error;
        c->stream.start_tls(t->tls->make_ssl(*c->cache, srv.url.host));
        auto [hec, hn] = co_await c->stream.async_handshake(base::use_tuple);
        if (c->timed_out || t->stopped) co_return "timeout";
        if (hec) co_return "TLS handshake failed: " + tls::handshake_failure(c->stream.ssl(), hec);
    }
    const std::string request = "GET " + h.path + " HTTP/1.1\r\nHost: " + srv.url.authority +
                                "\r\nConnection: close\r\nUser-Agent: sluice-health-check\r\n\r\n";
    auto [wec, wn] = co_await asio::async_write(c->stream, asio::buffer(request), base::use_tuple);
    if (c->timed_out || t->stopped) co_return "timeout";
    if (wec) co_return "write failed: " + wec.message();
    std::string why = co_await read_status(c, t);
    co_return why;
}

// Counts a check's result on its server; logs a change of state.
void record(const target& t, server& s, const std::string& why) {
    const auto& h = t.p->cfg().health;
    s.last_check_ms.store(unix_ms_now(), std::memory_order_relaxed);
    s.set_last_check(why.empty() ? "ok" : why);
    if (why.empty()) {
        s.check_failures.store(0, std::memory_order_relaxed);
        const auto passes = s.check_passes.fetch_add(1, std::memory_order_relaxed) + 1;
        if (!s.checked_down.load(std::memory_order_relaxed) || passes < h.healthy) return;
        s.back_at.store(ticks(clock::now()), std::memory_order_relaxed);  // its slow start
        s.checked_down.store(false, std::memory_order_release);
        spdlog::info("upstream {}: server {} is up again ({} passed checks in a row)", t.p->name(), s.label, passes);
        return;
    }
    s.check_passes.store(0, std::memory_order_relaxed);
    const auto failures = s.check_failures.fetch_add(1, std::memory_order_relaxed) + 1;
    if (s.checked_down.load(std::memory_order_relaxed) || failures < h.unhealthy) return;
    s.checked_down.store(true, std::memory_order_release);
    spdlog::warn("upstream {}: server {} is down: {} ({} failed checks in a row)", t.p->name(), s.label, why, failures);
}

asio::awaitable<void> run_check(std::shared_ptr<check> c, std::shared_ptr<target> t) {
    const std::string why = co_await probe(c, t);
    c->deadline.cancel();
    c->stream.close();
    if (t->stopped) co_return;  // abandoned: stop() or another start()
    t->running.erase(c->s.get());
    record(*t, *c->s, why);
}

}  // namespace

void health_checker::start(const std::vector<std::shared_ptr<pool>>& pools) {
    stop();
    for (const auto& p : pools) {
        const auto& cfg = p->cfg();
        if (cfg.health.path.empty()) {
            // Checks were turned off: no verdict of theirs stands.
            for (const auto& s : p->current()->servers) {
                s->check_passes.store(0, std::memory_order_relaxed);
                s->check_failures.store(0, std::memory_order_relaxed);
                if (!s->checked_down.exchange(false, std::memory_order_acq_rel)) continue;
                s->back_at.store(ticks(clock::now()), std::memory_order_relaxed);
                spdlog::info("upstream {}: server {} is up again (active checks are off)", p->name(), s->label);
            }
            continue;
        }
        auto t = std::make_shared<target>(ioc_, p);
        const bool https = std::any_of(cfg.servers.begin(), cfg.servers.end(), [](const auto& s) { return s.url.tls; });
        if (https) {
            try {
                t->tls = std::make_unique<const tls::client_context>(cfg);
            } catch (const std::exception& e) {
                // The snapshot built the same context a moment ago: not expected.
                t->tls_error = e.what();
                spdlog::error("upstream {}: health checks of https servers cannot run: {}", p->name(), e.what());
            }
        }
        t->due = clock::now();
        targets_.push_back(t);
        asio::post(ioc_, [this, t] {
            if (!t->stopped) tick(t);
        });
    }
}

health_checker::~health_checker() {
    try {
        stop();
    } catch (...) {  // a timer's cancel() throws only if the reactor fails: nothing left to do
    }
}

void health_checker::stop() {
    for (const auto& t : targets_) {
        t->stopped = true;
        t->timer.cancel();
        for (const auto& [s, c] : t->running) {
            c->deadline.cancel();
            c->cut();
        }
        t->running.clear();
    }
    targets_.clear();
}

void health_checker::tick(const std::shared_ptr<target>& t) {
    const auto interval = t->p->cfg().health.interval;
    const auto now = clock::now();
    t->due += interval;
    if (t->due <= now) t->due = now + interval;  // late (a busy loop): no burst to catch up
    t->timer.expires_at(t->due);
    t->timer.async_wait([this, t](error_code ec) {
        if (ec || t->stopped) return;
        tick(t);
    });
    const auto m = t->p->current();
    std::erase_if(t->sessions, [&](const auto& entry) {
        return std::none_of(m->servers.begin(), m->servers.end(),
                            [&](const auto& s) { return s.get() == entry.first; });
    });
    for (const auto& s : m->servers) {
        if (t->running.contains(s.get())) continue;  // its last check still runs: skip this tick
        auto c = std::make_shared<check>(ioc_, s);
        if (s->url.tls) {
            auto& cache = t->sessions[s.get()];
            if (!cache) cache = std::make_shared<tls::session_cache>();
            c->cache = cache;
        }
        t->running.emplace(s.get(), c);
        asio::co_spawn(ioc_, run_check(std::move(c), t), base::log_exception("health check"));
    }
}

}  // namespace sluice::upstream
