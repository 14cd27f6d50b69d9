// The deadline sweep (http/deadline_sweep.hpp) on real loopback sockets: an io_context the
// test drives itself, a 5 ms sweep tick, and bounded runs instead of sleeps.
#include "http/deadline_sweep.hpp"

#include <doctest/doctest.h>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <optional>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using sluice::http::deadline_sweep;
using sluice::http::tracked_connection;
using namespace std::chrono_literals;

constexpr auto tick = 5ms;

// A connected pair of loopback TCP sockets: `client` is the one the set tracks.
struct socket_pair {
    tcp::socket client, peer;
    explicit socket_pair(asio::io_context& ioc) : client(ioc), peer(ioc) {
        tcp::acceptor acceptor(ioc, {asio::ip::address_v4::loopback(), 0});
        client.connect(acceptor.local_endpoint());
        peer = acceptor.accept();
    }
};

// One pending read and how it ended.
struct read_op {
    std::array<char, 16> buf{};
    bool done = false;
    boost::system::error_code ec;
    std::size_t n = 0;

    void start(tcp::socket& s) {
        done = false;
        ec = {};
        n = 0;
        s.async_read_some(asio::buffer(buf), [this](boost::system::error_code e, std::size_t got) {
            done = true;
            ec = e;
            n = got;
        });
    }
};

// Runs `ioc` until `pred` holds or `limit` passes; returns pred().
template <class Pred>
bool run_until(asio::io_context& ioc, Pred pred, std::chrono::milliseconds limit = 1000ms) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred() && std::chrono::steady_clock::now() < end) {
        if (ioc.stopped()) ioc.restart();
        ioc.run_one_for(tick);
    }
    return pred();
}

// Runs `ioc` for `d` (several sweeps): for checking that something does NOT happen.
void run_for(asio::io_context& ioc, std::chrono::milliseconds d) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_for(d);
}

}  // namespace

TEST_CASE("deadline_sweep: a passed deadline cancels the pending read, arm() clears expired()") {
    asio::io_context ioc;
    socket_pair armed(ioc), unarmed(ioc);
    deadline_sweep set(ioc, tick);
    set.start();
    tracked_connection c(set, armed.client);
    tracked_connection other(set, unarmed.client);
    read_op r, other_read;
    other_read.start(unarmed.client);

    const auto started = std::chrono::steady_clock::now();
    c.arm(20ms);
    r.start(armed.client);
    REQUIRE(run_until(ioc, [&] { return r.done; }));
    CHECK(r.ec == asio::error::operation_aborted);
    CHECK(c.expired());
    CHECK(std::chrono::steady_clock::now() - started >= 20ms);  // never before its deadline
    // A connection with no deadline is left alone by the same sweeps.
    CHECK_FALSE(other_read.done);
    CHECK_FALSE(other.expired());

    c.arm(1h);
    CHECK_FALSE(c.expired());
    r.start(armed.client);
    run_for(ioc, 30ms);  // six sweeps: the new deadline is far off
    CHECK_FALSE(r.done);
    CHECK_FALSE(c.expired());
    asio::write(armed.peer, asio::buffer("x", 1));
    REQUIRE(run_until(ioc, [&] { return r.done; }));
    CHECK_FALSE(r.ec);
    CHECK(r.n == 1);
    CHECK_FALSE(c.expired());
}

TEST_CASE("deadline_sweep: an expired deadline that is not re-armed cancels an operation started after the expiry") {
    asio::io_context ioc;
    socket_pair p(ioc);
    deadline_sweep set(ioc, tick);
    set.start();
    tracked_connection c(set, p.client);

    // The deadline passes while no operation is pending (the read it guarded had completed).
    c.arm_until(sluice::http::clock::now() - 1ms);
    REQUIRE(run_until(ioc, [&] { return c.expired(); }));

    // The session starts its next read without arming again: the next sweep must still cancel it.
    read_op r;
    r.start(p.client);
    REQUIRE(run_until(ioc, [&] { return r.done; }));
    CHECK(r.ec == asio::error::operation_aborted);
    CHECK(c.expired());

    // And again at the sweep after: expiry never resets the deadline to "never".
    r.start(p.client);
    REQUIRE(run_until(ioc, [&] { return r.done; }));
    CHECK(r.ec == asio::error::operation_aborted);
}

TEST_CASE("deadline_sweep: watch_upstream(&s) makes expiry cancel s too, watch_upstream(nullptr) stops it") {
    asio::io_context ioc;
    socket_pair client(ioc), upstream(ioc);
    deadline_sweep set(ioc, tick);
    set.start();
    tracked_connection c(set, client.client);
    read_op on_client, on_upstream;

    c.watch_upstream(&upstream.client);
    c.arm(10ms);
    on_client.start(client.client);
    on_upstream.start(upstream.client);
    REQUIRE(run_until(ioc, [&] { return on_client.done && on_upstream.done; }));
    CHECK(on_client.ec == asio::error::operation_aborted);
    CHECK(on_upstream.ec == asio::error::operation_aborted);

    c.watch_upstream(nullptr);
    c.arm(10ms);
    on_client.start(client.client);
    on_upstream.start(upstream.client);
    REQUIRE(run_until(ioc, [&] { return on_client.done; }));
    CHECK(on_client.ec == asio::error::operation_aborted);
    run_for(ioc, 30ms);  // the expired deadline keeps being swept: the upstream is no longer touched
    CHECK_FALSE(on_upstream.done);

    asio::write(upstream.peer, asio::buffer("y", 1));
    REQUIRE(run_until(ioc, [&] { return on_upstream.done; }));
    CHECK_FALSE(on_upstream.ec);
    CHECK(on_upstream.n == 1);
}

TEST_CASE("deadline_sweep: drain() expires idle connections at once and calls on_empty once the set is empty") {
    asio::io_context ioc;
    socket_pair a(ioc), b(ioc);
    deadline_sweep set(ioc, tick);
    set.start();
    std::optional<tracked_connection> idle_conn, busy_conn;
    idle_conn.emplace(set, a.client);
    busy_conn.emplace(set, b.client);
    busy_conn->idle = false;
    read_op idle_read, busy_read;
    idle_read.start(a.client);
    busy_read.start(b.client);
    int emptied = 0;

    set.drain([&] { ++emptied; });
    CHECK(idle_conn->expired());  // at once, not at the next tick
    CHECK_FALSE(busy_conn->expired());
    REQUIRE(run_until(ioc, [&] { return idle_read.done; }));
    CHECK(idle_read.ec == asio::error::operation_aborted);

    idle_conn.reset();  // its session ends
    run_for(ioc, 30ms);
    CHECK(emptied == 0);  // the busy connection is still there and still running
    CHECK_FALSE(busy_read.done);
    CHECK_FALSE(busy_conn->expired());

    busy_conn->idle = true;  // its request is answered: it now waits for the next one
    REQUIRE(run_until(ioc, [&] { return busy_read.done; }));
    CHECK(busy_read.ec == asio::error::operation_aborted);
    CHECK(busy_conn->expired());
    CHECK(emptied == 0);

    busy_conn.reset();
    REQUIRE(run_until(ioc, [&] { return emptied > 0; }));
    run_for(ioc, 30ms);
    CHECK(emptied == 1);
    CHECK(set.size() == 0);
}

TEST_CASE("deadline_sweep: size() follows tracked connections, one outliving its set is safe to destroy") {
    asio::io_context ioc;
    socket_pair a(ioc), b(ioc);
    std::optional<deadline_sweep> set;
    set.emplace(ioc, tick);
    CHECK(set->size() == 0);
    std::optional<tracked_connection> first;
    first.emplace(*set, a.client);
    CHECK(set->size() == 1);
    {
        tracked_connection second(*set, b.client);
        CHECK(set->size() == 2);
        CHECK(second.is_linked());
    }
    CHECK(set->size() == 1);
    first.reset();
    CHECK(set->size() == 0);

    first.emplace(*set, a.client);
    tracked_connection survivor(*set, b.client);
    CHECK(set->size() == 2);
    set.reset();  // the worker's set goes first, as when its io_context is torn down
    CHECK_FALSE(first->is_linked());
    CHECK_FALSE(survivor.is_linked());
    first.reset();  // must not touch the destroyed set (safe_link would assert on a linked hook)
}
