#include "server/worker.hpp"

#include "base/async.hpp"
#include "http/async.hpp"
#include "server/session.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>

namespace sluice::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// The sweep's period bounds how late a deadline can fire.
clock::duration sweep_tick(const config::config& c) {
    auto shortest = std::min(c.server.header_timeout, c.server.idle_timeout);
    for (const auto& u : c.upstreams) shortest = std::min({shortest, u.connect_timeout, u.timeout});
    if (c.server.proxy_protocol) shortest = std::min(shortest, c.server.proxy_protocol->header_timeout);
    if (c.server.tls && c.server.tls->handshake_timeout.count() > 0)
        shortest = std::min(shortest, c.server.tls->handshake_timeout);
    auto tick = std::chrono::duration_cast<clock::duration>(shortest) / 10;
    return std::clamp<clock::duration>(tick, std::chrono::milliseconds(5), std::chrono::milliseconds(100));
}

asio::awaitable<void> accept_loop(worker& w, tcp::acceptor& acceptor, listener_kind kind) {
    using http::use_tuple;
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
        if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
        if (ec) {
            // Out of descriptors (or a transient error): back off instead of spinning.
            spdlog::warn("accept failed: {}", ec.message());
            asio::steady_timer t(w.ioc, std::chrono::milliseconds(50));
            co_await t.async_wait(use_tuple);
            continue;
        }
        if (w.open_connections.load(std::memory_order_relaxed) >= w.max_connections) {
            w.metrics.connection_rejected();
            boost::system::error_code ignored;
            socket.close(ignored);
            continue;
        }
        asio::co_spawn(w.ioc, serve(w, std::move(socket), kind), base::log_exception("connection"));
    }
}

}  // namespace

worker::worker(std::shared_ptr<const snapshot> s, metrics::shard& m, std::atomic<std::size_t>& open_conns,
               std::size_t max_conns, limit::store& st, identity::hasher h)
    : metrics(m),
      store(st),
      hasher(std::move(h)),
      open_connections(open_conns),
      max_connections(max_conns),
      connections(ioc, sweep_tick(*s->cfg)) {
    set_snapshot(std::move(s));
}

void worker::set_snapshot(std::shared_ptr<const snapshot> s) {
    std::vector<std::shared_ptr<upstream::lane>> next;
    for (const auto& p : s->pools) {
        const upstream::lane* before = nullptr;
        for (const auto& l : lanes)
            if (l->owner().name() == p->name()) before = l.get();
        next.push_back(std::make_shared<upstream::lane>(p, ioc.get_executor(), metrics, before));
        if (draining) next.back()->close_all();
    }
    lanes = std::move(next);
    const snapshot* raw = s.get();
    snap = std::shared_ptr<const snapshot>(raw, [keep = std::move(s)](const snapshot*) {});
}

std::shared_ptr<upstream::lane> worker::lane_of(const upstream::pool* p) const {
    for (const auto& l : lanes)
        if (&l->owner() == p) return l;
    return nullptr;
}

void worker::start() { connections.start(); }

void worker::accept() {
    if (draining) return;
    if (acceptor.is_open())
        asio::co_spawn(ioc, accept_loop(*this, acceptor, listener_kind::plain), base::log_exception("accept loop"));
    if (tls_acceptor.is_open())
        asio::co_spawn(ioc, accept_loop(*this, tls_acceptor, listener_kind::tls),
                       base::log_exception("TLS accept loop"));
    if (check_acceptor.is_open())
        asio::co_spawn(ioc, accept_loop(*this, check_acceptor, listener_kind::check),
                       base::log_exception("check accept loop"));
}

void worker::renew_while_held(held_lease& l) {
    leases_.push_back(l);
    if (!renewing_) renew_leases();
}

// Once a second: a lease is at least 3 s (config), renewed every third of it.
void worker::renew_leases() {
    renewing_ = !leases_.empty();
    if (!renewing_) return;  // nothing held: no timer keeps the loop busy
    lease_timer_.expires_after(std::chrono::seconds(1));
    lease_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) {
            renewing_ = false;
            return;
        }
        const auto now = clock::now();
        for (auto& l : leases_) l.renew_if_due(now);
        renew_leases();
    });
}

void worker::forget_leases() {
    while (!leases_.empty()) leases_.front().forget();
}

void worker::begin_drain(std::function<void()> on_drained) {
    draining = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
    tls_acceptor.close(ignored);
    check_acceptor.close(ignored);
    for (auto& l : lanes) l->close_all();
    connections.drain(std::move(on_drained));
}

}  // namespace sluice::server
