// Keep-alive connections to one upstream server, one pool per server and worker.
//
// take() hands out the most recently used idle connection (LIFO: the one least likely to
// have been closed by the upstream's own idle timeout); give_back() keeps it if the pool
// holds fewer than max_idle. take() checks that a connection has nothing to read (the
// upstream closed it, or sent bytes no request asked for) before handing it out, so a stray
// byte can never become the next client's response. Idle connections are checked the same
// way every second (one poll() over all of them), and those the upstream closed are
// closed. A per-connection watch would cost a syscall per request. One the upstream closes
// between take()'s check and the write is found out on reuse, and the caller retries
// idempotent requests once.
//
// Thread: the owning worker's thread only.
#pragma once

#include "metrics/metrics.hpp"
#include "tls/stream.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <poll.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::proxy {

struct upstream_connection {
    explicit upstream_connection(const boost::asio::any_io_executor& ex) : stream(boost::asio::ip::tcp::socket(ex)) {}
    tls::stream stream;
    boost::beast::flat_buffer buffer;
    bool reused = false;  // came from the pool: the upstream may have closed it meanwhile
};

class pool {
public:
    pool(const boost::asio::any_io_executor& ex, std::size_t max_idle, metrics::shard& metrics)
        : sweep_(ex), max_idle_(max_idle), metrics_(metrics) {}
    ~pool() { metrics_.idle_upstream_removed(idle_.size()); }
    pool(const pool&) = delete;
    pool& operator=(const pool&) = delete;
    std::unique_ptr<upstream_connection> take();
    // Keeps `c` for reuse. Only for a connection whose last response ended exactly at its
    // framing with nothing more read (c->buffer empty).
    void give_back(std::unique_ptr<upstream_connection> c);
    // Closes every idle connection, and from now on keeps none given back (a drain: the
    // sweep's timer would keep the worker's io_context from running out of work).
    void close_all();
    std::size_t idle() const { return idle_.size(); }

private:
    void start_sweep();
    void sweep();

    std::vector<std::unique_ptr<upstream_connection>> idle_;
    std::vector<pollfd> polled_;  // sweep()'s, kept for its capacity
    boost::asio::steady_timer sweep_;
    bool sweeping_ = false;
    std::size_t max_idle_;
    bool closed_ = false;
    metrics::shard& metrics_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // gone with the pool (its sweep's handler)
};

}  // namespace sluice::proxy
