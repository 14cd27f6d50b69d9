// Keep-alive connections to the upstream, one pool per worker.
//
// take() hands out the most recently used idle connection (LIFO: the one least likely to
// have been closed by the upstream's own idle timeout); give_back() keeps it if the pool
// holds fewer than max_idle. An idle connection is watched: one that becomes readable (the
// upstream closed it, or sent bytes no request asked for) is closed at once, and take()
// checks again before handing one out, so a stray byte can never become the next
// client's response. One the upstream closes between that check and the write is found
// out on reuse, and the caller retries idempotent requests once.
//
// Thread: the owning worker's thread only.
#pragma once

#include "metrics/metrics.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::proxy {

struct upstream_connection {
    explicit upstream_connection(boost::asio::any_io_executor ex) : socket(std::move(ex)) {}
    boost::asio::ip::tcp::socket socket;
    boost::beast::flat_buffer buffer;
    bool reused = false;  // came from the pool: the upstream may have closed it meanwhile
};

class pool {
public:
    pool(std::size_t max_idle, metrics::shard& metrics) : max_idle_(max_idle), metrics_(metrics) {}
    std::unique_ptr<upstream_connection> take();
    // Keeps `c` for reuse. Only for a connection whose last response ended exactly at its
    // framing with nothing more read (c->buffer empty).
    void give_back(std::unique_ptr<upstream_connection> c);
    // Closes every idle connection, and from now on keeps none given back (a drain: an idle
    // connection's watch would keep the worker's io_context from running out of work).
    void close_all();
    std::size_t idle() const { return idle_.size(); }

private:
    struct entry {
        std::unique_ptr<upstream_connection> conn;
        std::uint64_t serial;  // tells a watch's handler whether its connection is still here
    };
    void watch(entry& e);
    void drop(std::uint64_t serial);

    std::vector<entry> idle_;
    std::size_t max_idle_;
    std::uint64_t next_serial_ = 0;
    bool closed_ = false;
    char peek_ = 0;  // where the watches' receives write (one thread: they never run at once)
    metrics::shard& metrics_;
};

}  // namespace sluice::proxy
