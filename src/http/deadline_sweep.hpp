// Every live client connection of one worker, for two jobs that would otherwise need a
// timer per socket operation: deadlines and draining.
//
// A connection arms a deadline before each socket operation (a clock read and a store).
// One timer per worker sweeps the set every `tick` and cancels the sockets of any
// connection past its deadline; the cancelled operation completes with
// operation_aborted and the connection sees expired() == true. Unlike
// beast::tcp_stream's timeout, the socket stays open, so a 408 or 504 can still be sent.
// An expired deadline stays expired until the next arm(): an operation started after the
// expiry (the read it meant to cancel had already completed) is cancelled by the next sweep.
//
// Thread: the owning worker's thread only.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/intrusive/list.hpp>

#include <chrono>
#include <functional>

namespace sluice::http {

using clock = std::chrono::steady_clock;

class deadline_sweep;

class tracked_connection
    : public boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>> {
public:
    // Joins `set` for the connection's lifetime.
    tracked_connection(deadline_sweep& set, boost::asio::ip::tcp::socket& client);
    ~tracked_connection();
    tracked_connection(const tracked_connection&) = delete;
    tracked_connection& operator=(const tracked_connection&) = delete;

    void arm(clock::duration d) { arm_until(clock::now() + d); }
    void arm_until(clock::time_point t) {
        deadline_ = t;
        expired_ = false;
    }
    bool expired() const { return expired_; }
    // The upstream socket this connection is using, cancelled with the client's on expiry
    // or drain; null while it holds none. The caller clears it before the socket goes away.
    void watch_upstream(boost::asio::ip::tcp::socket* upstream) { upstream_ = upstream; }
    // True while waiting for the next request with no byte of it read: safe to close.
    bool idle = true;
    // The next sweep calls `on_sweep` once, unless unasked first: for work worth doing only
    // for an operation that lasts (one that ends before the next sweep never pays for it).
    void ask_sweep() { sweep_asked_ = true; }
    void unask_sweep() { sweep_asked_ = false; }
    std::function<void()> on_sweep;

private:
    friend class deadline_sweep;
    void expire();
    deadline_sweep& set_;
    clock::time_point deadline_ = clock::time_point::max();
    bool expired_ = false;
    bool sweep_asked_ = false;
    boost::asio::ip::tcp::socket& client_;
    boost::asio::ip::tcp::socket* upstream_ = nullptr;
};

class deadline_sweep {
public:
    deadline_sweep(boost::asio::io_context& ioc, clock::duration tick);
    ~deadline_sweep();
    std::size_t size() const { return list_.size(); }
    void start();
    // Stop the sweep once the set is empty, then call on_empty; expire idle connections now.
    void drain(std::function<void()> on_empty);

private:
    friend class tracked_connection;
    void sweep();
    boost::intrusive::list<tracked_connection, boost::intrusive::constant_time_size<true>> list_;
    boost::asio::steady_timer timer_;
    clock::duration tick_;
    bool draining_ = false;
    std::function<void()> on_empty_;
};

}  // namespace sluice::http
