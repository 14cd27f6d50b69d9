// The admin listener: /healthz, /readyz, /metrics, POST /reload, GET /top and GET /upstreams, on its own
// address and thread, and the admin API of /identities and /overrides (app/control_plane.hpp)
// through a handler. With admin.token_file every request but those of admin.open needs the
// bearer token (compared in constant time), else 401.
//
// Thread: runs on the io_context it is given (the app's main thread).
#pragma once

#include "app/reload.hpp"
#include "config/config.hpp"
#include "limit/offenders.hpp"
#include "metrics/metrics.hpp"
#include "upstream/status.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
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

// A request for the admin API's handler (/identities/..., /overrides...), valid until it answers.
struct admin_request {
    boost::beast::http::verb method;
    std::string_view path;   // as received, still percent-encoded
    std::string_view query;  // after '?', "" for none
    std::string_view body;
    std::string peer;  // the client's address, for the log line
};
struct admin_reply {
    unsigned status = 200;
    std::string body;   // JSON
    std::string allow;  // a 405's Allow field
};
using admin_handler = std::function<boost::asio::awaitable<admin_reply>(const admin_request&)>;

// What the admin listener needs of the running config, read per request: admin.token and
// admin.open (a reload changes them).
using admin_settings = std::function<const config::admin_config&()>;

class admin_server {
public:
    // `reload` re-reads the config file (POST /reload); it runs on this io_context's thread.
    // `offenders` gathers every worker's refusals of the last minute (GET /top); `upstreams`
    // the running pools (GET /upstreams), on this io_context's thread.
    admin_server(boost::asio::io_context& ioc, const boost::asio::ip::tcp::endpoint& listen, metrics::registry& metrics,
                 std::function<readiness()> ready, std::function<app::reload_result()> reload,
                 std::function<std::vector<limit::offender>()> offenders,
                 std::function<std::vector<upstream::pool_status>()> upstreams, admin_limits limits,
                 admin_settings settings, admin_handler api);
    ~admin_server();
    admin_server(const admin_server&) = delete;
    admin_server& operator=(const admin_server&) = delete;
    boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
    void start();
    void stop();

private:
    class connection;
    boost::asio::awaitable<void> serve(std::unique_ptr<connection> conn);
    boost::asio::awaitable<boost::beast::http::response<boost::beast::http::string_body>> respond(
        const boost::beast::http::request<boost::beast::http::string_body>& req, const std::string& peer);
    void make_room();

    boost::asio::io_context& ioc_;
    boost::asio::ip::tcp::acceptor acceptor_;
    metrics::registry& metrics_;
    std::function<readiness()> ready_;
    std::function<app::reload_result()> reload_;
    std::function<std::vector<limit::offender>()> offenders_;
    std::function<std::vector<upstream::pool_status>()> upstreams_;
    admin_limits limits_;
    admin_settings settings_;
    admin_handler api_;
    std::list<connection*> open_;  // the one waiting longest for a request first
    std::uint64_t evicted_ = 0;
    std::chrono::steady_clock::time_point next_eviction_log_{};
};

}  // namespace sluice::app
