#include "http/connection_set.hpp"

#include <utility>

namespace sluice::http {

void tracked_connection::expire() {
    expired_ = true;
    deadline_ = clock::time_point::max();
    boost::system::error_code ignored;
    if (client_) client_->cancel(ignored);
    if (upstream_) upstream_->cancel(ignored);
}

connection_set::connection_set(boost::asio::io_context& ioc, clock::duration tick) : timer_(ioc), tick_(tick) {}

connection_set::~connection_set() {
    while (!list_.empty()) list_.pop_front();
}

void connection_set::start() {
    timer_.expires_after(tick_);
    timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        sweep();
        if (!draining_ || !list_.empty()) {
            start();
        } else if (on_empty_) {
            std::exchange(on_empty_, nullptr)();
        }
    });
}

void connection_set::sweep() {
    auto now = clock::now();
    for (auto& c : list_)
        if (c.deadline_ <= now || (draining_ && c.idle)) c.expire();
}

void connection_set::drain(std::function<void()> on_empty) {
    draining_ = true;
    on_empty_ = std::move(on_empty);
    sweep();
}

}  // namespace sluice::http
