// redis_connection and redis_store against a real redis-server, started by each test on a
// free loopback port (needs /usr/bin/redis-server).
#include "store/redis_connection.hpp"
#include "store/redis_store.hpp"

#include <doctest/doctest.h>
#include <hiredis/hiredis.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using sluice::store::redis_clock;
using sluice::store::redis_connection;
using sluice::store::redis_connection_options;
using sluice::store::redis_counters;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
const char* const redis_bin = "/usr/bin/redis-server";
const char* const echo_script = "return ARGV[1]";

// Completion of the test's own coroutines: an exception fails the test, never vanishes.
void logged(const std::exception_ptr& e) {
    if (!e) return;
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& ex) {
        FAIL_CHECK("a test coroutine threw: " << ex.what());
    }
}

std::uint16_t free_port() {
    asio::io_context ioc;
    asio::ip::tcp::acceptor a(ioc, {asio::ip::make_address("127.0.0.1"), 0});
    return a.local_endpoint().port();
}

// A blocking hiredis client for the test's own commands (SCRIPT FLUSH, ...).
struct sync_client {
    redisContext* c = nullptr;
    explicit sync_client(std::uint16_t port) {
        timeval tv{0, 200'000};
        c = redisConnectWithTimeout("127.0.0.1", port, tv);
    }
    ~sync_client() {
        if (c) redisFree(c);
    }
    bool ok() const { return c && !c->err; }
    // The reply as text ("" on failure), for status, string and integer replies.
    std::string command(const std::vector<std::string>& argv) {
        std::vector<const char*> a;
        std::vector<std::size_t> l;
        for (auto& s : argv) {
            a.push_back(s.data());
            l.push_back(s.size());
        }
        auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(a.size()), a.data(), l.data()));
        if (!r) return "";
        std::string out =
            r->type == REDIS_REPLY_INTEGER ? std::to_string(r->integer)
            : r->str                       ? std::string(r->str, r->len)
            : r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_INTEGER
                ? std::to_string(r->element[0]->integer)
                : "";
        freeReplyObject(r);
        return out;
    }
};

class redis_server {
public:
    explicit redis_server(std::uint16_t port, std::vector<std::string> extra = {})
        : port_(port), extra_(std::move(extra)) {
        start();
    }
    ~redis_server() { stop(); }

    std::uint16_t port() const { return port_; }

    void start() {
        REQUIRE(pid_ < 0);
        std::string port = std::to_string(port_);
        std::vector<std::string> args{redis_bin, "--port", port,           "--bind", "127.0.0.1",
                                      "--save",  "",       "--appendonly", "no",     "--enable-debug-command",
                                      "local"};
        args.insert(args.end(), extra_.begin(), extra_.end());
        pid_ = ::fork();
        REQUIRE(pid_ >= 0);
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            int null = ::open("/dev/null", O_WRONLY);
            ::dup2(null, 1);
            ::dup2(null, 2);
            std::vector<char*> argv;
            argv.reserve(args.size() + 1);
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            ::execv(redis_bin, argv.data());
            ::_exit(127);
        }
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < until) {
            sync_client c(port_);
            if (c.ok() && c.command({"PING"}) == "PONG") return;
            if (c.ok() && c.command({"PING"}).starts_with("NOAUTH")) return;  // started with requirepass
            std::this_thread::sleep_for(20ms);
        }
        FAIL("redis-server did not answer PING within 5 s");
    }

    // Stops it (SIGTERM, or SIGKILL when `hard`) and reaps it.
    void stop(bool hard = false) {
        if (pid_ < 0) return;
        ::kill(pid_, hard ? SIGKILL : SIGTERM);
        const auto until = std::chrono::steady_clock::now() + 5s;
        int status = 0;
        while (::waitpid(pid_, &status, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > until) {
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &status, 0);
                break;
            }
            std::this_thread::sleep_for(5ms);
        }
        pid_ = -1;
    }

private:
    std::uint16_t port_;
    std::vector<std::string> extra_;
    pid_t pid_ = -1;
};

redis_connection_options options_for(std::uint16_t port, redis_clock::duration timeout) {
    redis_connection_options o;
    o.host = "127.0.0.1";
    o.port = port;
    o.timeout = timeout;
    o.script = echo_script;
    return o;
}

// Runs `body` as a coroutine on `ioc` until the io_context has nothing left to do (the body
// stops the connection at its end); rethrows what the body threw.
template <class Body>
void run(asio::io_context& ioc, Body body) {
    std::exception_ptr failure;
    bool done = false;
    asio::co_spawn(ioc, body(), [&](std::exception_ptr e) {
        failure = std::move(e);
        done = true;
    });
    ioc.run_for(30s);
    REQUIRE(done);
    if (failure) std::rethrow_exception(failure);
}

asio::awaitable<void> sleep_for(redis_clock::duration d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    auto [ec] = co_await t.async_wait(use_tuple);
    (void)ec;
}

// Polls `pred` every 5 ms for at most `bound`; true if it held.
template <class Pred>
asio::awaitable<bool> eventually(Pred pred, redis_clock::duration bound) {
    const auto until = redis_clock::now() + bound;
    while (!pred()) {
        if (redis_clock::now() > until) co_return false;
        co_await sleep_for(5ms);
    }
    co_return true;
}

std::string text(const redis_connection::result& r) {
    if (!r.ok() || !r.reply || !r.reply->str) {
        std::string out = "<";  // appended, not "<" + ...: GCC 12 -O2 warns -Wrestrict on that
        out += redis_connection::to_string(r.failure);
        out += ">";
        return out;
    }
    return std::string(r.reply->str, r.reply->len);
}

// A command line. (A braced list of string literals inside a coroutine trips GCC 12.)
template <class... Args>
std::vector<std::string> cmd(const Args&... args) {
    return {std::string(args)...};
}

double ms_since(redis_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(redis_clock::now() - t).count();
}

}  // namespace

TEST_CASE("concurrent calls are pipelined and each gets its own reply") {
    redis_server server(free_port());
    asio::io_context ioc;
    auto counters = std::make_shared<redis_counters>();
    auto conn = redis_connection::create(ioc.get_executor(), options_for(server.port(), 1s), counters);
    conn->start();

    run(ioc,
        [&]() -> asio::
                  awaitable<void> {
                      REQUIRE(co_await eventually([&] { return conn->ready(); }, 2s));
                      CHECK(conn->script_sha().size() == 40);
                      constexpr int n = 300;
                      std::vector<std::string> got(n);
                      int finished = 0;
                      for (int i = 0; i < n; ++i) {
                          auto one = [](std::shared_ptr<redis_connection> c,
                                        int i, std::string* out, int* finished) -> asio::
                                                                                    awaitable<void> {
                                                                                        // Odd ones by EVALSHA of the
                                                                                        // loaded script, even ones by
                                                                                        // EVAL.
                                                                                        std::vector<std::string> argv =
                    i % 2 ? std::vector<std::string>{"EVALSHA", c->script_sha(), "0", std::to_string(i)}
                          : std::vector<std::string>{"EVAL", "return ARGV[1]", "0", std::to_string(i)};
                                                                                        auto r = co_await c->call(
                                                                                            std::move(argv),
                                                                                            i % 2 == 1);
                                                                                        *out = text(r);
                                                                                        ++*finished;
                                                                                    };
                          asio::co_spawn(ioc, one(conn, i, &got[i], &finished), logged);
                      }
                      CHECK(co_await eventually([&] { return finished == n; }, 5s));
                      for (int i = 0; i < n; ++i) CHECK(got[i] == std::to_string(i));
                      const auto commands = counters->commands.get();
                      const auto writes = counters->writes.get();
                      MESSAGE("commands " << commands << " in writes " << writes);
                      CHECK(commands >= n);
                      CHECK(commands > writes);
                      CHECK(commands / writes > 1);
                      CHECK(counters->timeouts.get() == 0);
                      conn->stop();
                  });
    CHECK_FALSE(conn->ready());
}

TEST_CASE("a slow call times out at its deadline, and later calls still get their own replies") {
    redis_server server(free_port());
    asio::io_context ioc;
    auto counters = std::make_shared<redis_counters>();
    auto conn = redis_connection::create(ioc.get_executor(), options_for(server.port(), 100ms), counters);
    conn->start();

    run(ioc, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await eventually([&] { return conn->ready(); }, 2s));
        auto asked = redis_clock::now();
        auto slow = co_await conn->call(cmd("DEBUG", "SLEEP", "0.3"));
        const double waited = ms_since(asked);
        CHECK(slow.failure == redis_connection::error::timeout);
        CHECK(waited >= 99);
        CHECK(waited < 160);  // at its own deadline, not when Redis answers
        CHECK(counters->timeouts.get() == 1);

        // Written before Redis wakes (at ~300 ms): they follow the tombstone in the FIFO.
        co_await sleep_for(120ms);
        int finished = 0;
        std::vector<std::string> got(20);
        for (int i = 0; i < 20; ++i) {
            auto one = [](std::shared_ptr<redis_connection> c, int i, std::string* out,
                          int* finished) -> asio::awaitable<void> {
                std::vector<std::string> argv{"EVAL", "return ARGV[1]", "0", "late" + std::to_string(i)};
                auto r = co_await c->call(std::move(argv));
                *out = text(r);
                ++*finished;
            };
            asio::co_spawn(ioc, one(conn, i, &got[i], &finished), logged);
        }
        CHECK(co_await eventually([&] { return finished == 20; }, 2s));
        for (int i = 0; i < 20; ++i) CHECK(got[i] == "late" + std::to_string(i));
        auto after = co_await conn->call(cmd("EVAL", "return ARGV[1]", "0", "after"));
        CHECK(text(after) == "after");
        CHECK(counters->timeouts.get() == 1);
        CHECK(counters->connection_lost.get() == 0);  // no rebuild: the tombstone kept order
        CHECK(conn->ready());
        conn->stop();
    });
}

TEST_CASE("Redis stopped: calls fail at once, restarted: the connection recovers and reloads the script") {
    redis_server server(free_port());
    asio::io_context ioc;
    auto counters = std::make_shared<redis_counters>();
    auto conn = redis_connection::create(ioc.get_executor(), options_for(server.port(), 500ms), counters);
    conn->start();

    run(ioc, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await eventually([&] { return conn->ready(); }, 2s));
        const std::string sha = conn->script_sha();

        // A call in flight when Redis dies fails (never resent) well before its deadline.
        std::string in_flight;
        bool in_flight_done = false;
        auto pending = [](std::shared_ptr<redis_connection> c, std::string* out, bool* done) -> asio::awaitable<void> {
            auto r = co_await c->call(cmd("DEBUG", "SLEEP", "0.2"));
            *out = r.ok() ? "ok" : redis_connection::to_string(r.failure);
            *done = true;
        };
        asio::co_spawn(ioc, pending(conn, &in_flight, &in_flight_done), logged);
        co_await sleep_for(50ms);
        auto killed = redis_clock::now();
        server.stop(true);
        CHECK(co_await eventually([&] { return in_flight_done; }, 400ms));
        CHECK(in_flight == std::string(redis_connection::to_string(redis_connection::error::connection_lost)));
        MESSAGE("in-flight call failed " << ms_since(killed) << " ms after the kill");
        CHECK_FALSE(conn->ready());

        for (int i = 0; i < 5; ++i) {
            auto asked = redis_clock::now();
            auto r = co_await conn->call(cmd("PING"));
            CHECK(r.failure == redis_connection::error::not_ready);
            CHECK(ms_since(asked) < 20);  // timeout is 500 ms
            co_await sleep_for(30ms);
        }
        CHECK_FALSE(conn->ready());

        server.start();
        auto restarted = redis_clock::now();
        REQUIRE(co_await eventually([&] { return conn->ready(); }, 3s));
        MESSAGE("ready again " << ms_since(restarted) << " ms after the restart");
        CHECK(ms_since(restarted) < 1000);
        CHECK(counters->reconnects.get() == 1);
        CHECK(conn->script_sha() == sha);
        sync_client admin(server.port());
        CHECK(admin.command({"SCRIPT", "EXISTS", sha}) == "1");  // loaded by the handshake
        auto r = co_await conn->call(cmd("EVALSHA", sha, "0", "back"), true);
        CHECK(text(r) == "back");
        CHECK(counters->noscript_reloads.get() == 0);
        conn->stop();
    });
}

TEST_CASE("SCRIPT FLUSH: EVALSHAs meet NOSCRIPT, the script is reloaded once and each resent") {
    redis_server server(free_port());
    asio::io_context ioc;
    auto counters = std::make_shared<redis_counters>();
    auto conn = redis_connection::create(ioc.get_executor(), options_for(server.port(), 1s), counters);
    conn->start();

    run(ioc, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await eventually([&] { return conn->ready(); }, 2s));
        sync_client admin(server.port());
        CHECK(admin.command({"SCRIPT", "FLUSH"}) == "OK");
        int finished = 0;
        std::vector<std::string> got(30);
        for (int i = 0; i < 30; ++i) {
            auto one = [](std::shared_ptr<redis_connection> c, int i, std::string* out,
                          int* finished) -> asio::awaitable<void> {
                std::vector<std::string> argv{"EVALSHA", c->script_sha(), "0", "v" + std::to_string(i)};
                auto r = co_await c->call(std::move(argv), true);
                *out = text(r);
                ++*finished;
            };
            asio::co_spawn(ioc, one(conn, i, &got[i], &finished), logged);
        }
        CHECK(co_await eventually([&] { return finished == 30; }, 2s));
        for (int i = 0; i < 30; ++i)
            CHECK(got[i] == std::string("v").append(std::to_string(i)));  // (not "v" +: GCC 12's -Wrestrict)
        CHECK(counters->noscript_reloads.get() == 1);
        // Not marked resend_on_noscript: the NOSCRIPT error is its answer.
        CHECK(admin.command({"SCRIPT", "FLUSH"}) == "OK");
        auto plain = co_await conn->call(cmd("EVALSHA", conn->script_sha(), "0", "x"));
        REQUIRE(plain.ok());
        CHECK(sluice::store::is_noscript_reply(plain.reply.get()));
        conn->stop();
    });
}

TEST_CASE("the in-flight cap fails calls beyond it at once") {
    redis_server server(free_port());
    asio::io_context ioc;
    auto counters = std::make_shared<redis_counters>();
    auto opts = options_for(server.port(), 1s);
    opts.max_in_flight = 4;
    auto conn = redis_connection::create(ioc.get_executor(), opts, counters);
    conn->start();

    run(ioc, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await eventually([&] { return conn->ready(); }, 2s));
        int finished = 0, ok = 0;
        for (int i = 0; i < 4; ++i) {
            auto one = [](std::shared_ptr<redis_connection> c, int* ok, int* finished) -> asio::awaitable<void> {
                auto r = co_await c->call(cmd("DEBUG", "SLEEP", "0.05"));
                *ok += r.ok();
                ++*finished;
            };
            asio::co_spawn(ioc, one(conn, &ok, &finished), logged);
        }
        co_await sleep_for(10ms);
        auto asked = redis_clock::now();
        auto r = co_await conn->call(cmd("PING"));
        CHECK(r.failure == redis_connection::error::overloaded);
        CHECK(ms_since(asked) < 20);
        CHECK(co_await eventually([&] { return finished == 4; }, 2s));
        CHECK(ok == 4);
        auto again = co_await conn->call(cmd("PING"));
        CHECK(text(again) == "PONG");
        conn->stop();
    });
}

// --- the store, with the real rate-limit script ---------------------------------------------

namespace {

sluice::limit::tier fixed_tier(std::int64_t limit) {
    sluice::config::tier_config c;
    std::string id = "test/ip/fixed/1m/1m";
    std::string name = "ip-1m";
    c.kind = "ip";
    c.limit = limit;
    c.per = 60s;
    c.algo = sluice::config::algorithm::fixed;
    c.precision = 60s;
    return sluice::limit::tier::from(c, id, name);
}

}  // namespace

TEST_CASE("redis_store: decisions, the deny cache, and NOSCRIPT after SCRIPT FLUSH") {
    redis_server server(free_port());
    asio::io_context ioc;
    sluice::config::store_config cfg;
    cfg.type = sluice::config::store_config::kind::redis;
    cfg.redis_nodes = {{"127.0.0.1", server.port()}};
    cfg.redis_timeout = 500ms;
    sluice::store::redis_store store(cfg);

    std::vector<sluice::limit::tier> tiers{fixed_tier(2)};
    std::vector<sluice::limit::store_key> keys(1);
    keys[0].kind = sluice::identity::kind::ip;
    keys[0].id[0] = 42;
    keys[0].tiers = tiers;
    sluice::limit::check_request req{keys, 1};

    auto before = store.try_check(req);
    REQUIRE(before);
    CHECK(before->state == sluice::limit::check_result::status::error);  // not started: not ready
    CHECK(store.counters().errors.get() == 1);
    store.start(ioc.get_executor());

    run(ioc, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await eventually([&] { return store.ready(); }, 2s));
        CHECK_FALSE(store.try_check(req));
        auto first = co_await store.check(req);
        REQUIRE(first.state == sluice::limit::check_result::status::ok);
        CHECK(first.verdict.allowed);
        REQUIRE(first.verdict.tiers.size() == 1);
        CHECK(first.verdict.tiers[0].remaining == 1);

        // The script is gone: the next check still succeeds (NOSCRIPT, reload, resend).
        sync_client admin(server.port());
        CHECK(admin.command({"SCRIPT", "FLUSH"}) == "OK");
        auto second = co_await store.check(req);
        REQUIRE(second.state == sluice::limit::check_result::status::ok);
        CHECK(second.verdict.allowed);
        CHECK(second.verdict.tiers[0].remaining == 0);
        CHECK(store.counters().noscript_reloads.get() == 1);
        CHECK(store.counters().errors.get() == 1);  // only the one before start()

        auto third = co_await store.check(req);
        REQUIRE(third.state == sluice::limit::check_result::status::ok);
        CHECK_FALSE(third.verdict.allowed);
        CHECK(third.verdict.retry_after > 0);
        CHECK(third.verdict.retry_after <= 60'000'000);

        // Answered locally now, until the retry_after Redis gave.
        auto cached = store.try_check(req);
        REQUIRE(cached);
        REQUIRE(cached->state == sluice::limit::check_result::status::ok);
        CHECK_FALSE(cached->verdict.allowed);
        CHECK(cached->verdict.retry_after <= third.verdict.retry_after);
        CHECK(cached->verdict.retry_after > third.verdict.retry_after - 1'000'000);
        REQUIRE(cached->verdict.tiers.size() == 1);
        CHECK(cached->verdict.tiers[0].t == &tiers[0]);
        CHECK(store.counters().deny_cache_hits.get() == 1);
        CHECK(store.counters().deny_cache_size.get() == 1);
        CHECK(store.keys_held() == 0);

        store.on_reload();
        CHECK_FALSE(store.try_check(req));
        CHECK(store.counters().deny_cache_size.get() == 0);

        // Redis gone: try_check answers an error at once.
        server.stop();
        CHECK(co_await eventually([&] { return !store.ready(); }, 2s));
        auto down = store.try_check(req);
        REQUIRE(down);
        CHECK(down->state == sluice::limit::check_result::status::error);
        auto down_check = co_await store.check(req);
        CHECK(down_check.state == sluice::limit::check_result::status::error);
        store.stop();
    });
}

TEST_CASE("redis_store: an admission's receipt, and take_back gives back exactly its charge in one EVALSHA") {
    redis_server server(free_port());
    asio::io_context ioc;
    sluice::config::store_config cfg;
    cfg.type = sluice::config::store_config::kind::redis;
    cfg.redis_nodes = {{"127.0.0.1", server.port()}};
    cfg.redis_timeout = 500ms;
    sluice::store::redis_store store(cfg);
    const auto log_tier = [](const std::string& kind, std::int64_t limit) {
        sluice::config::tier_config c;
        c.kind = kind;
        c.limit = limit;
        c.per = 3'600'000ms;
        c.algo = sluice::config::algorithm::log;
        return sluice::limit::tier::from(c, "test/" + kind + "/log/1h", kind + "-1h");
    };
    std::vector<sluice::limit::tier> ip{log_tier("ip", 3)}, user{log_tier("user", 5)};
    std::vector<sluice::limit::store_key> keys(2);
    keys[0] = {sluice::identity::kind::ip, {}, ip};
    keys[1] = {sluice::identity::kind::user, {}, user};
    keys[0].id[0] = 7;
    keys[1].id[0] = 8;
    sluice::limit::check_request req{keys, 2};
    req.want_receipt = true;
    store.start(ioc.get_executor());

    run(ioc, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await eventually([&] { return store.ready(); }, 2s));
        auto first = co_await store.check(req);
        REQUIRE(first.state == sluice::limit::check_result::status::ok);
        REQUIRE(first.verdict.allowed);
        REQUIRE(first.taken.at.size() == 2);
        CHECK(first.taken.at[0] > 0);
        CHECK_FALSE(first.taken.local);
        sluice::limit::check_request one{keys, 1};
        auto second = co_await store.check(one);  // ip: 3 of 3
        REQUIRE(second.verdict.allowed);
        CHECK(second.taken.at.empty());  // not asked for

        const auto commands = store.counters().commands.get();
        const bool done = co_await store.take_back(req, first.taken, 2);
        CHECK(done);
        CHECK(store.counters().commands.get() == commands + 1);  // both identifiers, one call
        auto third = co_await store.check(one);
        REQUIRE(third.verdict.allowed);
        CHECK(third.verdict.tiers.at(0).remaining == 1);  // the second's and this one's stay
        CHECK(third.verdict.tiers.at(1).remaining == 3);

        // A receipt that is not this request's is refused.
        sluice::limit::receipt wrong;
        wrong.at = {1};
        const bool refused = co_await store.take_back(req, wrong, 1);
        CHECK_FALSE(refused);
        // Redis gone: false, counted as an error.
        server.stop();
        CHECK(co_await eventually([&] { return !store.ready(); }, 2s));
        const auto errors = store.counters().errors.get();
        const bool down = co_await store.take_back(req, first.taken, 1);
        CHECK_FALSE(down);
        CHECK(store.counters().errors.get() == errors + 1);
        store.stop();
    });
}

TEST_CASE("a head outstanding for longer than stall_after fails everything and rebuilds the connection") {
    redis_server server(free_port());
    asio::io_context ioc;
    auto counters = std::make_shared<redis_counters>();
    auto opts = options_for(server.port(), 100ms);  // stall_after: max(3 x 100 ms, 1 s)
    auto conn = redis_connection::create(ioc.get_executor(), opts, counters);
    conn->start();

    run(ioc, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await eventually([&] { return conn->ready(); }, 2s));
        auto asked = redis_clock::now();
        auto slow = co_await conn->call(cmd("DEBUG", "SLEEP", "1.6"));
        CHECK(slow.failure == redis_connection::error::timeout);
        CHECK(co_await eventually([&] { return counters->connection_lost.get() == 1; }, 2s));
        MESSAGE("connection rebuilt " << ms_since(asked) << " ms after the slow call was written");
        CHECK(ms_since(asked) >= 990);
        CHECK(ms_since(asked) < 1400);
        // Redis answers the new connection once its sleep is over.
        REQUIRE(co_await eventually([&] { return conn->ready(); }, 3s));
        CHECK(counters->reconnects.get() == 1);
        auto r = co_await conn->call(cmd("EVAL", "return ARGV[1]", "0", "fresh"));
        CHECK(text(r) == "fresh");
        conn->stop();
    });
}

TEST_CASE("handshake: AUTH and SELECT, a wrong password never becomes ready") {
    redis_server server(free_port(), {"--requirepass", "s3cret"});
    {
        asio::io_context ioc;
        auto counters = std::make_shared<redis_counters>();
        auto opts = options_for(server.port(), 500ms);
        opts.password = "s3cret";
        opts.database = 3;
        auto conn = redis_connection::create(ioc.get_executor(), opts, counters);
        conn->start();
        run(ioc, [&]() -> asio::awaitable<void> {
            REQUIRE(co_await eventually([&] { return conn->ready(); }, 2s));
            auto set = co_await conn->call(cmd("SET", "hs-key", "in-db-3"));
            CHECK(text(set) == "OK");
            conn->stop();
        });
        sync_client admin(server.port());
        CHECK(admin.command({"AUTH", "s3cret"}) == "OK");
        CHECK(admin.command({"SELECT", "3"}) == "OK");
        CHECK(admin.command({"GET", "hs-key"}) == "in-db-3");
    }
    {
        asio::io_context ioc;
        auto counters = std::make_shared<redis_counters>();
        auto opts = options_for(server.port(), 500ms);
        opts.password = "wrong";
        auto conn = redis_connection::create(ioc.get_executor(), opts, counters);
        conn->start();
        run(ioc, [&]() -> asio::awaitable<void> {
            co_await sleep_for(300ms);
            CHECK_FALSE(conn->ready());
            auto r = co_await conn->call(cmd("PING"));
            CHECK(r.failure == redis_connection::error::not_ready);
            conn->stop();
        });
    }
}

TEST_CASE("READONLY (the node is a replica now): that call gets the error and the connection is rebuilt") {
    redis_server replica(free_port(), {"--replicaof", "127.0.0.1", std::to_string(free_port())});
    asio::io_context ioc;
    auto counters = std::make_shared<redis_counters>();
    auto conn = redis_connection::create(ioc.get_executor(), options_for(replica.port(), 1s), counters);
    conn->start();

    run(ioc, [&]() -> asio::awaitable<void> {
        REQUIRE(co_await eventually([&] { return conn->ready(); }, 2s));
        auto r = co_await conn->call(cmd("SET", "k", "v"));
        REQUIRE(r.ok());
        CHECK(r.reply->type == REDIS_REPLY_ERROR);
        CHECK(text(r).starts_with("READONLY"));
        CHECK(co_await eventually([&] { return counters->connection_lost.get() == 1; }, 1s));
        // Reads still work once it has reconnected (here, to the same replica).
        REQUIRE(co_await eventually([&] { return conn->ready() && counters->reconnects.get() == 1; }, 3s));
        CHECK(text(co_await conn->call(cmd("GET", "k"))) == "<ok>");  // nil: no string
        conn->stop();
    });
}
