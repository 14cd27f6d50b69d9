#include "app/server.hpp"

#include "http/admin.hpp"
#include "http/worker.hpp"
#include "metrics/metrics.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <csignal>
#include <cstdio>
#include <thread>

namespace sluice::app {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Each proxied request holds two descriptors; the soft limit is often 1024.
void raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) spdlog::warn("could not raise RLIMIT_NOFILE");
}

tcp::endpoint endpoint_of(const config::address& a) {
    return {asio::ip::make_address(a.host), a.port};
}

std::vector<tcp::endpoint> resolve_upstream(const config::upstream_url& url) {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    std::vector<tcp::endpoint> out;
    for (const auto& r : resolver.resolve(url.host, std::to_string(url.port))) out.push_back(r.endpoint());
    return out;
}

// The first acceptor may ask for port 0; the others then share the port it got.
void open_acceptor(tcp::acceptor& a, tcp::endpoint ep) {
    a.open(ep.protocol());
    a.set_option(asio::socket_base::reuse_address(true));
    a.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true));
    a.bind(ep);
    a.listen(asio::socket_base::max_listen_connections);
}

std::string to_text(const tcp::endpoint& ep) {
    auto a = ep.address();
    return a.is_v6() ? "[" + a.to_string() + "]:" + std::to_string(ep.port())
                     : a.to_string() + ":" + std::to_string(ep.port());
}

}  // namespace

int run_server(std::shared_ptr<const config::config> cfg, unsigned threads) {
    std::signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    if (threads == 0) threads = cfg->server.threads;
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());

    std::vector<tcp::endpoint> upstream;
    try {
        upstream = resolve_upstream(cfg->upstream.url);
    } catch (const std::exception& e) {
        spdlog::error("cannot resolve upstream host {}: {}", cfg->upstream.url.host, e.what());
        return 1;
    }

    metrics::registry metrics(threads, {"default"});
    std::size_t per_worker = (cfg->server.max_connections + threads - 1) / threads;
    std::vector<std::unique_ptr<http::worker>> workers;
    asio::io_context main_ioc{1};
    std::unique_ptr<http::admin_server> admin;
    try {
        auto ep = endpoint_of(cfg->server.listen);
        for (unsigned i = 0; i < threads; ++i) {
            workers.push_back(std::make_unique<http::worker>(cfg, metrics.worker(i), upstream, per_worker));
            open_acceptor(workers.back()->acceptor, ep);
            ep = workers.back()->acceptor.local_endpoint();
        }
        admin = std::make_unique<http::admin_server>(main_ioc, endpoint_of(cfg->admin.listen), metrics,
                                                     [] { return true; });
    } catch (const boost::system::system_error& e) {
        spdlog::error("cannot listen: {}", e.what());
        return 1;
    }

    // Signals are caught from here on, before the ports are announced: whoever reads the
    // announcement may stop us at once.
    asio::signal_set signals(main_ioc, SIGINT, SIGTERM);
    // Printed at any log level: scripts and tests read the ports from these lines.
    std::fprintf(stderr, "sluice: proxy listening on %s (%u workers), upstream %s:%u\n",
                 to_text(workers[0]->acceptor.local_endpoint()).c_str(), threads, cfg->upstream.url.host.c_str(),
                 unsigned{cfg->upstream.url.port});
    std::fprintf(stderr, "sluice: admin listening on %s\n", to_text(admin->local_endpoint()).c_str());

    std::vector<std::thread> pool;
    std::size_t running = threads;
    for (auto& w : workers) {
        w->start();
        pool.emplace_back([&w, &main_ioc, &running] {
            w->ioc.run();
            asio::post(main_ioc, [&] {
                if (--running == 0) main_ioc.stop();
            });
        });
    }
    admin->start();

    // Stop: stop accepting, let in-flight requests finish, force the rest after drain_timeout.
    asio::steady_timer drain_deadline(main_ioc);
    signals.async_wait([&](boost::system::error_code ec, int sig) {
        if (ec) return;
        spdlog::info("signal {}: draining for up to {} ms", sig, cfg->server.drain_timeout.count());
        admin->stop();
        auto accepting = std::make_shared<std::size_t>(workers.size());
        for (auto& w : workers)
            asio::post(w->ioc, [&w, &main_ioc, accepting] {
                w->begin_drain();
                asio::post(main_ioc, [accepting] {
                    if (--*accepting == 0) spdlog::info("stopped accepting; finishing in-flight requests");
                });
            });
        drain_deadline.expires_after(cfg->server.drain_timeout);
        drain_deadline.async_wait([&](boost::system::error_code tec) {
            if (tec) return;
            spdlog::warn("drain timeout: closing the connections still open");
            for (auto& w : workers) w->ioc.stop();
        });
    });
    main_ioc.run();
    for (auto& w : workers) w->ioc.stop();
    for (auto& t : pool) t.join();
    spdlog::info("stopped");
    return 0;
}

}  // namespace sluice::app
