#include "proxy/pool.hpp"

namespace sluice::proxy {

std::unique_ptr<upstream_connection> pool::take() {
    if (idle_.empty()) return nullptr;
    auto c = std::move(idle_.back());
    idle_.pop_back();
    c->reused = true;
    metrics_.set_idle_upstream(idle_.size());
    return c;
}

void pool::give_back(std::unique_ptr<upstream_connection> c) {
    if (idle_.size() >= max_idle_ || !c->socket.is_open()) return;
    c->buffer.clear();
    idle_.push_back(std::move(c));
    metrics_.set_idle_upstream(idle_.size());
}

void pool::close_all() {
    idle_.clear();
    metrics_.set_idle_upstream(0);
}

}  // namespace sluice::proxy
