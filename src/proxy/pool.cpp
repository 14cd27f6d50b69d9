#include "proxy/pool.hpp"

#include "http/async.hpp"

#include <poll.h>

namespace sluice::proxy {

namespace {

// Whether the socket has anything to read (bytes, EOF or an error) right now.
bool readable(boost::asio::ip::tcp::socket& s) {
    pollfd p{s.native_handle(), POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) != 0;
}

}  // namespace

std::unique_ptr<upstream_connection> pool::take() {
    while (!idle_.empty()) {
        auto c = std::move(idle_.back().conn);
        idle_.pop_back();
        boost::system::error_code ignored;
        c->socket.cancel(ignored);  // its watch completes as operation_aborted, touching nothing
        metrics_.set_idle_upstream(idle_.size());
        if (readable(c->socket)) continue;
        c->reused = true;
        return c;
    }
    return nullptr;
}

void pool::give_back(std::unique_ptr<upstream_connection> c) {
    if (closed_ || idle_.size() >= max_idle_ || !c->socket.is_open() || c->buffer.size() != 0) return;
    idle_.push_back({std::move(c), next_serial_++});
    watch(idle_.back());
    metrics_.set_idle_upstream(idle_.size());
}

void pool::watch(entry& e) {
    http::async_peek(e.conn->socket, peek_, [this, serial = e.serial](boost::system::error_code ec, std::size_t) {
        if (ec != boost::asio::error::operation_aborted) drop(serial);
    });
}

void pool::drop(std::uint64_t serial) {
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if (it->serial != serial) continue;
        idle_.erase(it);
        metrics_.set_idle_upstream(idle_.size());
        return;
    }
}

void pool::close_all() {
    closed_ = true;
    idle_.clear();
    metrics_.set_idle_upstream(0);
}

}  // namespace sluice::proxy
