// Keep-alive connections to the upstream, one pool per worker.
//
// take() hands out the most recently used idle connection (LIFO: the one least likely to
// have been closed by the upstream's own idle timeout); give_back() keeps it if the pool
// holds fewer than max_idle. Idle connections are not watched: one the upstream closed
// is found out on reuse, and the caller retries idempotent requests once.
//
// Thread: the owning worker's thread only.
#pragma once

#include "metrics/metrics.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

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
    void give_back(std::unique_ptr<upstream_connection> c);
    void close_all();
    std::size_t idle() const { return idle_.size(); }

private:
    std::vector<std::unique_ptr<upstream_connection>> idle_;
    std::size_t max_idle_;
    metrics::shard& metrics_;
};

}  // namespace sluice::proxy
