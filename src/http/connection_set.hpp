// Every live client connection of one worker, for two jobs that would otherwise need a
// timer per socket operation: deadlines and draining.
//
// A connection arms a deadline before each socket operation (a clock read and a store).
// One timer per worker sweeps the set every `tick` and cancels the sockets of any
// connection past its deadline; the cancelled operation completes with
// operation_aborted and the connection sees expired() == true. Unlike
// beast::tcp_stream's timeout, the socket stays open, so a 408 or 504 can still be sent.
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

class tracked_connection
    : public boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
public:
    void arm(clock::duration d) {
        deadline_ = clock::now() + d;
        expired_ = false;
    }
    void disarm() { deadline_ = clock::time_point::max(); }
    bool expired() const { return expired_; }
    // Sockets cancelled on expiry or drain. Either may be null.
    void watch(boost::asio::ip::tcp::socket* client, boost::asio::ip::tcp::socket* upstream) {
        client_ = client;
        upstream_ = upstream;
    }
    void watch_upstream(boost::asio::ip::tcp::socket* upstream) { upstream_ = upstream; }
    // True while waiting for the next request with no byte of it read: safe to close.
    bool idle = true;

private:
    friend class connection_set;
    void expire();
    clock::time_point deadline_ = clock::time_point::max();
    bool expired_ = false;
    boost::asio::ip::tcp::socket* client_ = nullptr;
    boost::asio::ip::tcp::socket* upstream_ = nullptr;
};

class connection_set {
public:
    connection_set(boost::asio::io_context& ioc, clock::duration tick);
    ~connection_set();
    void add(tracked_connection& c) { list_.push_back(c); }
    std::size_t size() const { return list_.size(); }
    void start();
    // Stop the sweep once the set is empty, then call on_empty; expire idle connections now.
    void drain(std::function<void()> on_empty);

private:
    void sweep();
    boost::intrusive::list<tracked_connection, boost::intrusive::constant_time_size<false>> list_;
    boost::asio::steady_timer timer_;
    clock::duration tick_;
    bool draining_ = false;
    std::function<void()> on_empty_;
};

}  // namespace sluice::http
