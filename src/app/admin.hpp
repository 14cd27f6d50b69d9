// The admin listener: /healthz, /readyz, /metrics, POST /reload, GET /top and GET /upstreams, on its own
// address and thread.
//
// Thread: runs on the io_context it is given (the app's main thread).
#pragma once

#include "app/reload.hpp"
#include "limit/offenders.hpp"
#include "metrics/metrics.hpp"
#include "upstream/status.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <vector>

namespace sluice::app {

// What /readyz answers: ready 200, degraded 200 (store.on_error local is deciding on the
// local memory store: requests are still limited), not_ready 503.
enum class readiness { ready, degraded, not_ready };

struct admin_limits {
    std::chrono::milliseconds header_timeout{10'000};  // a request, and writing its answer
    std::chrono::milliseconds idle_timeout{60'000};    // between requests
    // At the cap, a new connection closes the one that has waited longest for its request:
    // idle and slow clients cannot lock a probe out.
    std::size_t max_connections = 64;
};

class admin_server {
public:
    // `reload` re-reads the config file (POST /reload); it runs on this io_context's thread.
    // `offenders` gathers every worker's refusals of the last minute (GET /top); `upstreams`
    // the running pools (GET /upstreams), on this io_context's thread.
    admin_server(boost::asio::io_context& ioc, const boost::asio::ip::tcp::endpoint& listen,
                 const metrics::registry& metrics, std::function<readiness()> ready,
                 std::function<app::reload_result()> reload, std::function<std::vector<limit::offender>()> offenders,
                 std::function<std::vector<upstream::pool_status>()> upstreams, admin_limits limits);
    ~admin_server();
    admin_server(const admin_server&) = delete;
    admin_server& operator=(const admin_server&) = delete;
    boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
    void start();
    void stop();

private:
    class connection;
    boost::asio::awaitable<void> serve(std::unique_ptr<connection> conn);
    void make_room();

    boost::asio::io_context& ioc_;
    boost::asio::ip::tcp::acceptor acceptor_;
    const metrics::registry& metrics_;
    std::function<readiness()> ready_;
    std::function<app::reload_result()> reload_;
    std::function<std::vector<limit::offender>()> offenders_;
    std::function<std::vector<upstream::pool_status>()> upstreams_;
    admin_limits limits_;
    std::list<connection*> open_;  // the one waiting longest for a request first
    std::uint64_t evicted_ = 0;
    std::chrono::steady_clock::time_point next_eviction_log_{};
};

}  // namespace sluice::app
