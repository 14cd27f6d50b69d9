// The active health checker (upstream/health.hpp) against a scripted server on loopback, on
// an io_context the test drives: verdicts and their counts on the server object, the
// request it sends, interim answers, timeouts, and a stop() that leaves nothing running.
#include "upstream/health.hpp"

#include <doctest/doctest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using sluice::upstream::health_checker;
using sluice::upstream::pool;
using sluice::upstream::server;

// Answers each connection with answer() (nothing: holds it open, unanswered), after
// reading the request head, which it keeps in `last_request`.
struct scripted {
    explicit scripted(asio::io_context& ioc) : acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
        asio::co_spawn(ioc, accept_loop(), asio::detached);
    }

    asio::awaitable<void> accept_loop() {
        for (;;) {
            auto [ec, sock] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
            if (ec) co_return;
            asio::co_spawn(acceptor.get_executor(), serve(std::make_shared<tcp::socket>(std::move(sock))),
                           asio::detached);
        }
    }

    asio::awaitable<void> serve(std::shared_ptr<tcp::socket> sock) {
        std::string in;
        auto [ec, n] = co_await asio::async_read_until(*sock, asio::dynamic_buffer(in), "\r\n\r\n",
                                                       asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
        last_request = in.substr(0, n);
        ++requests;
        const std::string out = answer();
        if (out.empty()) {
            held.push_back(sock);
            co_return;
        }
        auto [wec, wn] = co_await asio::async_write(*sock, asio::buffer(out), asio::as_tuple(asio::use_awaitable));
        (void)wec;
        boost::system::error_code ignored;
        sock->close(ignored);
    }

    void close() {
        boost::system::error_code ignored;
        acceptor.close(ignored);
        for (auto& s : held) s->close(ignored);
        held.clear();
    }

    tcp::acceptor acceptor;
    std::function<std::string()> answer = [] { return std::string("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); };
    std::string last_request;
    int requests = 0;
    std::vector<std::shared_ptr<tcp::socket>> held;
};

struct fixture {
    fixture() : up(ioc), checker(ioc) {
        auto c = std::make_shared<sluice::config::config>();
        sluice::config::upstream_config u;
        u.name = "api";
        sluice::config::upstream_server_config s;
        s.url.host = "127.0.0.1";
        s.url.port = up.acceptor.local_endpoint().port();
        s.url.authority = "127.0.0.1:" + std::to_string(s.url.port);
        u.servers.push_back(s);
        u.url = s.url;
        u.health.path = "/healthz?deep=1";
        u.health.interval = 40ms;
        u.health.timeout = 30ms;
        u.health.healthy = 2;
        u.health.unhealthy = 3;
        c->upstreams.push_back(u);
        cfg = c;
        p = std::make_shared<pool>(cfg, cfg->upstreams[0]);
        srv = std::make_shared<server>(cfg->upstreams[0].servers[0], up.acceptor.local_endpoint());
        p->publish(sluice::upstream::make_members({srv}));
    }

    // Runs the io_context until `done` holds (true) or 5 s pass (false).
    template <class Pred>
    bool run_until(Pred done) {
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            ioc.run_for(5ms);
            if (ioc.stopped()) ioc.restart();
        }
        return true;
    }

    asio::io_context ioc;
    scripted up;
    health_checker checker;
    std::shared_ptr<const sluice::config::config> cfg;
    std::shared_ptr<pool> p;
    std::shared_ptr<server> srv;
};

}  // namespace

TEST_CASE("health checker: down after `unhealthy` failures, up after `healthy` passes, the request as documented") {
    fixture f;
    f.checker.start({f.p});
    REQUIRE(f.run_until([&] { return f.srv->check_passes.load() >= 1; }));
    CHECK(f.up.last_request == "GET /healthz?deep=1 HTTP/1.1\r\nHost: " + f.srv->url.authority +
                                   "\r\nConnection: close\r\nUser-Agent: sluice-health-check\r\n\r\n");
    CHECK(f.srv->last_check() == "ok");
    CHECK(f.srv->last_check_ms.load() > 0);
    CHECK_FALSE(f.srv->checked_down.load());

    f.up.answer = [] { return std::string("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"); };
    REQUIRE(f.run_until([&] { return f.srv->check_failures.load() >= 2; }));
    CHECK_FALSE(f.srv->checked_down.load());  // two failures are not three
    REQUIRE(f.run_until([&] { return f.srv->checked_down.load(); }));
    CHECK(f.srv->check_failures.load() == 3);
    CHECK(f.srv->check_passes.load() == 0);
    CHECK(f.srv->last_check() == "status 503");
    CHECK(f.srv->back_at.load() == 0);

    // An interim answer, then the final one: a pass.
    f.up.answer = [] {
        return std::string("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n");
    };
    REQUIRE(f.run_until([&] { return f.srv->check_passes.load() >= 1; }));
    CHECK(f.srv->checked_down.load());  // one pass is not two
    REQUIRE(f.run_until([&] { return !f.srv->checked_down.load(); }));
    CHECK(f.srv->check_passes.load() == 2);
    CHECK(f.srv->back_at.load() > 0);  // its slow start begins

    // Not HTTP: a failure of its own name.
    f.up.answer = [] { return std::string("SSH-2.0-OpenSSH\r\n"); };
    REQUIRE(f.run_until([&] { return f.srv->check_failures.load() >= 1; }));
    CHECK(f.srv->last_check() == "not an HTTP answer");
    f.checker.stop();
    f.up.close();
}

TEST_CASE("health checker: a server that never answers times out, and stop() leaves nothing on the io_context") {
    fixture f;
    f.up.answer = [] { return std::string(); };  // held open, unanswered
    f.checker.start({f.p});
    REQUIRE(f.run_until([&] { return f.srv->checked_down.load(); }));
    CHECK(f.srv->last_check() == "timeout");
    // A check in flight now (the server holds it): stop() must end it too.
    const int seen = f.up.requests;
    REQUIRE(f.run_until([&] { return f.up.requests > seen; }));
    f.checker.stop();
    f.up.close();
    f.ioc.restart();
    f.ioc.run_for(3s);
    CHECK(f.ioc.stopped());  // out of work, not out of time
}

TEST_CASE("health checker: a refused connection fails, and a pool without a path is not checked and comes up") {
    fixture f;
    f.up.close();  // nothing listens there now
    f.checker.start({f.p});
    REQUIRE(f.run_until([&] { return f.srv->checked_down.load(); }));
    CHECK(f.srv->last_check() == "connect refused");

    // The same server in a pool whose checks are off: up at once.
    auto cfg = std::make_shared<sluice::config::config>(*f.cfg);
    cfg->upstreams[0].health.path.clear();
    auto off = std::make_shared<pool>(cfg, cfg->upstreams[0]);
    off->publish(sluice::upstream::make_members({f.srv}));
    f.checker.start({off});
    CHECK_FALSE(f.srv->checked_down.load());
    CHECK(f.srv->check_failures.load() == 0);
    f.ioc.restart();
    f.ioc.run_for(3s);
    CHECK(f.ioc.stopped());
}
