// The upstream connection pool (proxy/pool.hpp) on real loopback sockets: a local acceptor
// plays the upstream, and the test drives the io_context itself (bounded runs, no sleeps).
#include "proxy/pool.hpp"

#include "metrics/metrics.hpp"

#include <doctest/doctest.h>
#include <poll.h>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using sluice::proxy::pool;
using sluice::proxy::upstream_connection;
using namespace std::chrono_literals;

// A pooled-to-be connection and the upstream's end of it.
struct upstream_link {
    std::unique_ptr<upstream_connection> conn;
    tcp::socket server;
    upstream_connection* raw = nullptr;
};

struct pool_fixture {
    asio::io_context ioc;
    tcp::acceptor acceptor{ioc, {asio::ip::address_v4::loopback(), 0}};
    sluice::metrics::registry registry{1};

    upstream_link connect() {
        auto c = std::make_unique<upstream_connection>(ioc.get_executor());
        c->stream.socket().connect(acceptor.local_endpoint());
        upstream_link l{std::move(c), acceptor.accept(), nullptr};
        l.raw = l.conn.get();
        return l;
    }

    // Runs the io_context until `pred` holds or three seconds pass (the pool sweeps its idle
    // connections every second); returns pred().
    template <class Pred>
    bool run_until(Pred pred) {
        const auto end = std::chrono::steady_clock::now() + 3s;
        while (!pred() && std::chrono::steady_clock::now() < end) {
            if (ioc.stopped()) ioc.restart();
            ioc.run_one_for(5ms);
        }
        return pred();
    }

    // Whether the upstream's end sees the connection closed by the pool within 3 s: EOF,
    // or a reset when the pool's end had unread bytes.
    bool closed_by_pool(tcp::socket& server) {
        std::array<char, 8> buf{};
        bool done = false;
        boost::system::error_code ec;
        server.async_read_some(asio::buffer(buf), [&](boost::system::error_code e, std::size_t) {
            done = true;
            ec = e;
        });
        const bool finished = run_until([&] { return done; });
        if (!finished) server.cancel();
        run_until([&] { return done; });
        return finished && (ec == asio::error::eof || ec == asio::error::connection_reset);
    }

    // The sluice_upstream_idle_connections gauge as scraped.
    std::string idle_gauge() const {
        std::istringstream in(registry.scrape());
        const std::string name = "sluice_upstream_idle_connections ";
        for (std::string line; std::getline(in, line);)
            if (line.rfind(name, 0) == 0) return line.substr(name.size());
        return "(absent)";
    }
};

// Waits (poll, at most a second) until `s` has something to read: the peer's byte or EOF has
// arrived, without running the io_context.
bool wait_readable(tcp::socket& s) {
    pollfd p{s.native_handle(), POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 1000) == 1;
}

}  // namespace

TEST_CASE("pool: give_back then take returns the same connection marked reused, most recent first") {
    pool_fixture f;
    pool p(f.ioc.get_executor(), 4, f.registry.worker(0));
    CHECK(p.take() == nullptr);

    auto a = f.connect();
    auto b = f.connect();
    CHECK_FALSE(a.conn->reused);
    p.give_back(std::move(a.conn));
    p.give_back(std::move(b.conn));
    CHECK(p.idle() == 2);
    CHECK(f.idle_gauge() == "2");

    auto first = p.take();
    REQUIRE(first);
    CHECK(first.get() == b.raw);  // LIFO: the most recently used
    CHECK(first->reused);
    CHECK(p.idle() == 1);
    CHECK(f.idle_gauge() == "1");
    auto second = p.take();
    REQUIRE(second);
    CHECK(second.get() == a.raw);
    CHECK(second->reused);
    CHECK(p.idle() == 0);
    CHECK(p.take() == nullptr);

    // The connection handed out still works.
    f.ioc.restart();
    f.ioc.poll();
    asio::write(b.server, asio::buffer("ok", 2));
    std::array<char, 2> got{};
    asio::read(first->stream.socket(), asio::buffer(got));
    CHECK(std::string(got.data(), 2) == "ok");
}

TEST_CASE("pool: give_back drops a connection with buffered bytes, a closed one, and any beyond max_idle") {
    pool_fixture f;
    pool p(f.ioc.get_executor(), 1, f.registry.worker(0));

    auto buffered = f.connect();
    auto n = asio::buffer_copy(buffered.conn->buffer.prepare(1), asio::buffer("z", 1));
    buffered.conn->buffer.commit(n);
    p.give_back(std::move(buffered.conn));
    CHECK(p.idle() == 0);
    CHECK(f.closed_by_pool(buffered.server));

    auto closed = f.connect();
    closed.conn->stream.socket().close();
    p.give_back(std::move(closed.conn));
    CHECK(p.idle() == 0);

    auto kept = f.connect();
    auto extra = f.connect();
    p.give_back(std::move(kept.conn));
    p.give_back(std::move(extra.conn));
    CHECK(p.idle() == 1);
    CHECK(f.idle_gauge() == "1");
    CHECK(f.closed_by_pool(extra.server));
    auto c = p.take();
    REQUIRE(c);
    CHECK(c.get() == kept.raw);
}

TEST_CASE("pool: an idle connection whose upstream sends a byte is dropped at the next sweep") {
    pool_fixture f;
    pool p(f.ioc.get_executor(), 4, f.registry.worker(0));
    auto a = f.connect();
    auto b = f.connect();
    p.give_back(std::move(a.conn));
    p.give_back(std::move(b.conn));
    CHECK(p.idle() == 2);

    asio::write(a.server, asio::buffer("!", 1));  // a byte no request asked for
    REQUIRE(f.run_until([&] { return p.idle() == 1; }));
    CHECK(f.idle_gauge() == "1");
    CHECK(f.closed_by_pool(a.server));
    auto c = p.take();  // the other one stays pooled
    REQUIRE(c);
    CHECK(c.get() == b.raw);
}

TEST_CASE("pool: an idle connection the upstream closes is dropped at the next sweep") {
    pool_fixture f;
    pool p(f.ioc.get_executor(), 4, f.registry.worker(0));
    auto a = f.connect();
    auto b = f.connect();
    p.give_back(std::move(a.conn));
    p.give_back(std::move(b.conn));

    b.server.close();
    REQUIRE(f.run_until([&] { return p.idle() == 1; }));
    auto c = p.take();
    REQUIRE(c);
    CHECK(c.get() == a.raw);
    CHECK(p.idle() == 0);
}

TEST_CASE("pool: take() skips a readable connection even before the sweep has seen it") {
    pool_fixture f;
    pool p(f.ioc.get_executor(), 4, f.registry.worker(0));
    auto a = f.connect();
    auto wrote = f.connect();
    auto closed = f.connect();
    p.give_back(std::move(a.conn));
    p.give_back(std::move(wrote.conn));
    p.give_back(std::move(closed.conn));

    asio::write(wrote.server, asio::buffer("!", 1));
    closed.server.close();
    REQUIRE(wait_readable(wrote.raw->stream.socket()));
    REQUIRE(wait_readable(closed.raw->stream.socket()));
    // No io_context run since: no sweep has seen them.
    CHECK(p.idle() == 3);

    auto c = p.take();
    REQUIRE(c);
    CHECK(c.get() == a.raw);  // the two newer ones were skipped
    CHECK(c->reused);
    CHECK(p.idle() == 0);
    CHECK(f.idle_gauge() == "0");
    CHECK(f.closed_by_pool(wrote.server));

    // The sweep that was due finds the pool empty and does not come back: the io_context
    // runs out of work.
    f.ioc.restart();
    f.ioc.run_for(3s);
    CHECK(f.ioc.stopped());
    CHECK(p.idle() == 0);
}

TEST_CASE("pool: close_all drops every idle connection") {
    pool_fixture f;
    pool p(f.ioc.get_executor(), 4, f.registry.worker(0));
    auto a = f.connect();
    auto b = f.connect();
    p.give_back(std::move(a.conn));
    p.give_back(std::move(b.conn));
    p.close_all();
    CHECK(p.idle() == 0);
    // Its sweep (due in 1 s) is cancelled: the io_context runs out of work well before.
    f.ioc.restart();
    CHECK(f.ioc.run_for(300ms) >= 1);
    CHECK(f.ioc.stopped());
    CHECK(f.idle_gauge() == "0");
    CHECK(f.closed_by_pool(a.server));
    CHECK(f.closed_by_pool(b.server));
    CHECK(p.take() == nullptr);
}
