#include "http/deadline_sweep.hpp"

#include <utility>

namespace sluice::http {

tracked_connection::tracked_connection(deadline_sweep& set, boost::asio::ip::tcp::socket& client)
    : set_(set), client_(client) {
    set_.list_.push_back(*this);
}

// A set destroyed first (its io_context torn down with sessions still suspended) has
// already unlinked every connection.
tracked_connection::~tracked_connection() {
    if (is_linked()) set_.list_.erase(set_.list_.iterator_to(*this));
}

void tracked_connection::expire() {
    expired_ = true;
    boost::system::error_code ignored;
    client_.cancel(ignored);
    if (upstream_) upstream_->cancel(ignored);
}

deadline_sweep::deadline_sweep(boost::asio::io_context& ioc, clock::duration tick) : timer_(ioc), tick_(tick) {}

deadline_sweep::~deadline_sweep() { list_.clear(); }

void deadline_sweep::start() {
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

void deadline_sweep::sweep() {
    auto now = clock::now();
    for (auto& c : list_) {
        if (c.deadline_ <= now || (draining_ && c.idle)) c.expire();
        if (std::exchange(c.sweep_asked_, false) && c.on_sweep) c.on_sweep();
    }
}

void deadline_sweep::drain(std::function<void()> on_empty) {
    draining_ = true;
    on_empty_ = std::move(on_empty);
    sweep();
}

}  // namespace sluice::http
