#include "proxy/pool.hpp"

namespace sluice::proxy {

namespace {

// Whether the connection has anything to read (bytes, EOF or an error) right now.
bool readable(tls::stream& s) {
    if (s.pending() > 0) return true;
    pollfd p{s.socket().native_handle(), POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) != 0;
}

}  // namespace

std::unique_ptr<upstream_connection> pool::take() {
    while (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        metrics_.idle_upstream_removed();
        if (readable(c->stream)) continue;
        c->reused = true;
        return c;
    }
    return nullptr;
}

void pool::give_back(std::unique_ptr<upstream_connection> c) {
    if (closed_ || idle_.size() >= max_idle_ || !c->stream.is_open() || c->stream.pending() != 0 ||
        c->buffer.size() != 0)
        return;
    idle_.push_back(std::move(c));
    metrics_.idle_upstream_added();
    if (!sweeping_) start_sweep();
}

void pool::start_sweep() {
    sweeping_ = true;
    sweep_.expires_after(std::chrono::seconds(1));
    // A handler already queued when the pool goes runs with success: `alive_` tells.
    sweep_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](boost::system::error_code ec) {
        if (ec || alive.expired()) return;  // close_all(), or the pool is gone
        sweeping_ = false;
        sweep();
        if (!idle_.empty()) start_sweep();
    });
}

void pool::sweep() {
    polled_.clear();
    for (auto& c : idle_) polled_.push_back({c->stream.socket().native_handle(), POLLIN | POLLRDHUP, 0});
    if (::poll(polled_.data(), polled_.size(), 0) <= 0) return;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < idle_.size(); ++i)
        if (polled_[i].revents == 0) idle_[kept++] = std::move(idle_[i]);
    metrics_.idle_upstream_removed(idle_.size() - kept);
    idle_.resize(kept);
}

void pool::close_all() {
    closed_ = true;
    metrics_.idle_upstream_removed(idle_.size());
    idle_.clear();
    sweep_.cancel();
    sweeping_ = false;
}

}  // namespace sluice::proxy
