#include "app/gateway.hpp"

#include "app/admin.hpp"
#include "app/control_plane.hpp"
#include "app/reload.hpp"
#include "metrics/metrics.hpp"
#include "server/access_log.hpp"
#include "server/snapshot.hpp"
#include "server/worker.hpp"
#include "service/rls.hpp"
#include "store/fallback_store.hpp"
#include "store/memory_store.hpp"
#include "store/redis_store.hpp"
#include "upstream/status.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/resource.h>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <thread>

namespace sluice::app {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// sluice_store_kind_evictions_total from the memory store's counts, kinds by their text.
void add_kind_evictions(metrics::registry& m, const store::memory_store& mem) {
    m.add_kind_evictions([&mem] {
        std::vector<std::pair<std::string, std::uint64_t>> out;
        for (const auto& [kind, n] : mem.kind_evictions()) out.emplace_back(identity::to_string(kind), n);
        return out;
    });
}

// Each proxied request holds two descriptors; the soft limit is often 1024.
void raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) spdlog::warn("could not raise RLIMIT_NOFILE");
}

tcp::endpoint endpoint_of(const config::address& a) { return {asio::ip::make_address(a.host), a.port}; }

// What a loaded config says an operator should look at, and the certificates the TLS
// listener now serves (for sluice_tls_certificate_expiry_seconds).
void took_config(const config::config& c, metrics::registry& m) {
    for (const auto& w : c.warnings) spdlog::warn("{}", w);
    std::vector<std::pair<std::string, std::int64_t>> certs;
    if (c.server.tls)
        for (const auto& cert : c.server.tls->certificates)
            certs.emplace_back(cert.names.empty() ? cert.cert_file : cert.names.front(), cert.not_after);
    m.set_certificates(std::move(certs));
}

std::string to_text(const tcp::endpoint& ep) { return upstream::address_text(ep); }

// tls.verify: false is allowed (a test upstream, a self-signed one) but said.
void warn_if_unverified(const config::config& c) {
    for (const auto& u : c.upstreams) {
        const bool https = std::any_of(u.servers.begin(), u.servers.end(), [](const auto& s) { return s.url.tls; });
        if (https && !u.tls.verify)
            spdlog::warn(
                "{}.tls.verify is false: the upstream's certificate is not verified, and anyone on the path can "
                "read and change its traffic",
                u.at);
    }
}

// What the start-up line says of the upstreams: the default pool's first url, or the pools' names.
std::string upstream_summary(const config::config& c) {
    if (const auto* d = c.find_upstream(""); d && d->servers.size() == 1)
        return d->url.host + ":" + std::to_string(d->url.port);
    std::string out = "pools";
    for (const auto& u : c.upstreams) {
        out += out.size() == 5 ? " " : ",";
        out += u.name;
    }
    return out;
}

// SO_REUSEPORT lets every worker's acceptor share the port, and would let another process
// share it as silently, each keeping its own counts. A probe without it fails to bind where
// any socket listens. (Two gateways probing in the same instant can both pass: the window
// is the time between this probe and the bind that follows it.)
void refuse_if_taken(const tcp::endpoint& ep) {
    if (ep.port() == 0) return;
    asio::io_context ioc;
    tcp::acceptor probe(ioc);
    probe.open(ep.protocol());
    probe.set_option(asio::socket_base::reuse_address(true));
    boost::system::error_code ec;
    probe.bind(ep, ec);
    if (ec == asio::error::address_in_use)
        throw std::runtime_error(to_text(ep) + ": the address is already in use (another process listens there)");
}

// The first acceptor may ask for port 0; the others then share the port it got.
void open_acceptor(tcp::acceptor& a, const tcp::endpoint& ep) {
    a.open(ep.protocol());
    a.set_option(asio::socket_base::reuse_address(true));
    a.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true));
    a.bind(ep);
    a.listen(asio::socket_base::max_listen_connections);
}

// The gateway process: workers, store, admin listener, signals.
class gateway {
public:
    gateway(std::shared_ptr<const config::config> cfg, unsigned threads)
        : cfg_(std::move(cfg)),
          threads_(threads                ? threads
                   : cfg_->server.threads ? cfg_->server.threads
                                          : std::max(1u, std::thread::hardware_concurrency())),
          metrics_(threads_) {}

    int run();

private:
    bool start();
    void wait_for_store(std::chrono::steady_clock::time_point deadline);
    void open_listeners();
    void drain(int sig);
    reload_result reload();

    std::shared_ptr<const config::config> cfg_;
    unsigned threads_;
    metrics::registry metrics_;
    bool start_store();
    limit::store& store_for(std::size_t worker);
    readiness store_readiness() const;
    std::vector<limit::offender> offenders() const;
    void add_redis_metrics();

    std::unique_ptr<store::memory_store> memory_;                   // store.type memory, or on_error local: shared
    std::vector<std::unique_ptr<store::redis_store>> redis_;        // store.type redis: one per worker
    std::unique_ptr<store::fallback_state> fallback_state_;         // store.on_error local
    std::vector<std::unique_ptr<store::fallback_store>> fallback_;  // on_error local: one per worker
    std::unique_ptr<server::access_log> access_log_;                // null: log.access.path off
    std::atomic<std::size_t> open_connections_{0};                  // client connections, every worker
    std::vector<std::unique_ptr<server::worker>> workers_;
    asio::io_context main_ioc_{1};
    upstream::registry upstreams_{main_ioc_};
    std::shared_ptr<const server::snapshot> snap_;  // the running config's
    std::unique_ptr<control_plane> control_;        // the admin's blocks, overrides and store calls
    std::unique_ptr<admin_server> admin_;
    std::unique_ptr<service::rls_server> rls_;  // service.grpc_listen; null when off
    asio::signal_set stop_signals_{main_ioc_, SIGINT, SIGTERM};
    asio::signal_set reload_signal_{main_ioc_, SIGHUP};
    asio::signal_set reopen_signal_{main_ioc_, SIGUSR1};
    asio::steady_timer drain_deadline_{main_ioc_};
    asio::steady_timer collect_timer_{main_ioc_};
    asio::steady_timer store_wait_{main_ioc_};
    bool draining_ = false;
    asio::steady_timer reload_timer_{main_ioc_};
    bool reload_queued_ = false;          // a SIGHUP's reload is waiting on reload_timer_
    std::atomic<bool> listening_{false};  // the proxy listener is open (/readyz is not_ready before)
    int exit_code_ = 0;
    void collect_expired();
};

// Expired identities leave the memory store within a second even when no request comes.
void gateway::collect_expired() {
    collect_timer_.expires_after(std::chrono::seconds(1));
    collect_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        memory_->collect_expired();
        collect_expired();
    });
}

bool gateway::start_store() {
    using kind = config::store_config::kind;
    if (cfg_->store.type == kind::memory) {
        memory_ = std::make_unique<store::memory_store>(cfg_->store.memory_max_keys);
        auto* mem = memory_.get();
        metrics_.set_store_gauges([mem] { return mem->keys_held(); }, [mem] { return mem->evictions(); });
        add_kind_evictions(metrics_, *mem);
        return true;
    }
    store::redis_store_options redis_options;
    try {
        if (cfg_->store.redis_tls) redis_options.tls = store::make_tls_context(*cfg_->store.redis_tls);
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return false;
    }
    for (unsigned i = 0; i < threads_; ++i)
        redis_.push_back(std::make_unique<store::redis_store>(cfg_->store, redis_options));
    add_redis_metrics();
    if (cfg_->store.on_error == config::store_config::failure_mode::local) {
        // One memory store for every worker: the gateway's share of a limit is its own, not per thread.
        memory_ = std::make_unique<store::memory_store>(cfg_->store.memory_max_keys);
        auto* mem = memory_.get();
        metrics_.set_store_gauges([mem] { return mem->keys_held(); }, [mem] { return mem->evictions(); });
        add_kind_evictions(metrics_, *mem);
        fallback_state_ = std::make_unique<store::fallback_state>(cfg_->store.fleet_size);
        std::vector<const metrics::fallback_counters*> counters;
        for (auto& r : redis_) {
            fallback_.push_back(std::make_unique<store::fallback_store>(*r, *memory_, *fallback_state_));
            counters.push_back(&fallback_.back()->counters());
        }
        metrics_.add_fallback(std::move(counters), [this] { return store_readiness() == readiness::degraded; });
    }
    return true;
}

limit::store& gateway::store_for(std::size_t worker) {
    if (!fallback_.empty()) return *fallback_[worker];
    if (memory_) return *memory_;
    return *redis_[worker];
}

// With on_error local a gateway whose shared store does not answer still limits, locally:
// degraded, not unready.
readiness gateway::store_readiness() const {
    if (!listening_.load(std::memory_order_acquire)) return readiness::not_ready;  // waiting for the store at start
    bool connected = true;
    for (const auto& r : redis_) connected = connected && r->ready();
    if (fallback_state_) return connected && !fallback_state_->degraded() ? readiness::ready : readiness::degraded;
    return connected ? readiness::ready : readiness::not_ready;
}

// Every worker's refusals of the last minute (not merged).
std::vector<limit::offender> gateway::offenders() const {
    const auto now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
    std::vector<limit::offender> all;
    for (const auto& w : workers_) w->refusals.collect(now.count(), all);
    return all;
}

void gateway::add_redis_metrics() {
    std::vector<const metrics::redis_counters*> counters;
    for (const auto& r : redis_) counters.push_back(&r->counters());
    metrics_.add_redis(std::move(counters), [this] {
        std::size_t n = 0;
        for (const auto& r : redis_) n += r->ready() ? 1 : 0;
        return n;
    });
}

bool gateway::start() {
    std::shared_ptr<const server::snapshot> snap;
    try {
        auto pools = upstreams_.build(cfg_);
        snap = std::make_shared<const server::snapshot>(cfg_, metrics_, pools);
        upstreams_.install(std::move(pools));
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return false;
    }
    took_config(*cfg_, metrics_);
    warn_if_unverified(*cfg_);
    const char* secret = std::getenv(cfg_->store.hash_secret_env.c_str());
    if (!secret || !*secret)
        spdlog::warn(
            "{} is not set: identifiers are hashed without a key (plain SHA-256); set it, the same on "
            "every gateway, so that stored keys cannot be reversed by enumeration",
            cfg_->store.hash_secret_env);
    identity::hasher hasher(secret ? secret : "");
    if (!start_store()) return false;
    try {
        if (cfg_->log.access_path != "off") {
            access_log_ = std::make_unique<server::access_log>(cfg_->log.access_path, threads_);
            metrics_.add_access_log([log = access_log_.get()] { return log->dropped(); });
        }
    } catch (const std::exception& e) {
        spdlog::error("cannot open the access log {}: {}", cfg_->log.access_path, e.what());
        return false;
    }
    for (unsigned i = 0; i < threads_; ++i) {
        workers_.push_back(std::make_unique<server::worker>(snap, metrics_.worker(i), open_connections_,
                                                            cfg_->server.max_connections, store_for(i), hasher));
        if (access_log_) workers_.back()->access = &access_log_->lane_of(i);
    }
    snap_ = snap;
    std::vector<control_plane::worker_link> links;
    for (unsigned i = 0; i < threads_; ++i)
        links.push_back({workers_[i].get(), redis_.empty() ? nullptr : redis_[i].get()});
    control_ = std::make_unique<control_plane>(
        main_ioc_, std::move(links), hasher, [this] { return snap_; }, metrics_);
    metrics_.add_controls([this] { return control_->counts(); });
    try {
        if (cfg_->server.plain) refuse_if_taken(endpoint_of(cfg_->server.listen));
        if (cfg_->server.tls) refuse_if_taken(endpoint_of(cfg_->server.tls->listen));
        if (cfg_->service.http_listen) refuse_if_taken(endpoint_of(*cfg_->service.http_listen));
        admin_ = std::make_unique<admin_server>(
            main_ioc_, endpoint_of(cfg_->admin.listen), metrics_, [this] { return store_readiness(); },
            [this] { return reload(); }, [this] { return offenders(); },
            [this] { return upstream::status_of(upstreams_.pools(), upstream::clock::now()); },
            admin_limits{cfg_->server.header_timeout, cfg_->server.idle_timeout, 64},
            [this]() -> const config::admin_config& { return cfg_->admin; },
            [this](const admin_request& r) { return control_->handle(r); });
        metrics_.add_limited_identities([this] { return limit::offenders::merge(offenders()).size(); });
        // Scraped on the admin listener's thread, the main one, where reloads install pools.
        metrics_.add_upstreams(
            [this] { return upstream::figures_of(upstream::status_of(upstreams_.pools(), upstream::clock::now())); });
    } catch (const std::exception& e) {
        spdlog::error("cannot listen: {}", e.what());
        return false;
    }
    return true;
}

// A gateway that listened before its store could decide would answer its first requests
// by store.on_error (allow: unlimited; deny: refused). Until every worker's store is ready
// (connected, script loaded, a Cluster's slot map read), or the deadline, the proxy port
// stays closed; the admin port is open meanwhile, and /readyz says not_ready.
void gateway::wait_for_store(std::chrono::steady_clock::time_point deadline) {
    if (draining_) return;
    const bool ready = std::all_of(redis_.begin(), redis_.end(), [](const auto& r) { return r->ready(); });
    // The blocks and overrides first: a blocked caller must not pass a gateway that just started.
    if (ready) return control_->load_then([this] { open_listeners(); });
    if (std::chrono::steady_clock::now() >= deadline) {
        if (cfg_->store.redis_start_timeout.count() == 0) return open_listeners();  // asked not to wait
        spdlog::warn(
            "the store cannot decide yet after store.redis.start_timeout ({} ms): listening anyway; requests follow "
            "store.on_error until it can, and /readyz says not_ready",
            cfg_->store.redis_start_timeout.count());
        return open_listeners();
    }
    store_wait_.expires_after(std::chrono::milliseconds(10));
    store_wait_.async_wait([this, deadline](boost::system::error_code ec) {
        if (!ec) wait_for_store(deadline);
    });
}

void gateway::open_listeners() {
    if (draining_) return;
    try {
        if (cfg_->server.plain) {
            auto ep = endpoint_of(cfg_->server.listen);
            refuse_if_taken(ep);  // again: the wait may have been long
            for (auto& w : workers_) {
                open_acceptor(w->acceptor, ep);
                ep = w->acceptor.local_endpoint();
            }
        }
        if (cfg_->server.tls) {
            auto tls_ep = endpoint_of(cfg_->server.tls->listen);
            refuse_if_taken(tls_ep);
            for (auto& w : workers_) {
                open_acceptor(w->tls_acceptor, tls_ep);
                tls_ep = w->tls_acceptor.local_endpoint();
            }
        }
        if (cfg_->service.http_listen) {
            auto check_ep = endpoint_of(*cfg_->service.http_listen);
            refuse_if_taken(check_ep);
            for (auto& w : workers_) {
                open_acceptor(w->check_acceptor, check_ep);
                check_ep = w->check_acceptor.local_endpoint();
            }
        }
    } catch (const std::exception& e) {
        spdlog::error("cannot listen: {}", e.what());
        exit_code_ = 1;
        main_ioc_.stop();
        return;
    }
    std::string grpc_bound;
    if (cfg_->service.grpc_listen) {
        std::vector<server::worker*> ws;
        for (auto& w : workers_) ws.push_back(w.get());
        rls_ = std::make_unique<service::rls_server>(std::move(ws), cfg_->service.max_concurrent_calls);
        try {
            grpc_bound = rls_->start(*cfg_->service.grpc_listen);
        } catch (const std::exception& e) {
            spdlog::error("cannot listen: {}", e.what());
            rls_.reset();
            exit_code_ = 1;
            main_ioc_.stop();
            return;
        }
    }
    // Read before a worker uses the acceptors.
    const auto bound = cfg_->server.plain ? to_text(workers_[0]->acceptor.local_endpoint()) : std::string("off");
    const auto tls_bound = cfg_->server.tls ? to_text(workers_[0]->tls_acceptor.local_endpoint()) : std::string();
    const auto check_bound =
        cfg_->service.http_listen ? to_text(workers_[0]->check_acceptor.local_endpoint()) : std::string();
    for (auto& w : workers_) asio::post(w->ioc, [w = w.get()] { w->accept(); });
    listening_.store(true, std::memory_order_release);
    // Printed at any log level: scripts and tests read the ports from these lines.
    std::fprintf(stderr, "sluice: proxy listening on %s (%u workers), upstream %s\n", bound.c_str(), threads_,
                 upstream_summary(*cfg_).c_str());
    if (!tls_bound.empty()) std::fprintf(stderr, "sluice: TLS listening on %s\n", tls_bound.c_str());
    if (!check_bound.empty()) std::fprintf(stderr, "sluice: check listening on %s\n", check_bound.c_str());
    if (!grpc_bound.empty())
        std::fprintf(stderr, "sluice: rate-limit service (gRPC) listening on %s\n", grpc_bound.c_str());
}

// Stop accepting, let in-flight requests finish, force the rest after drain_timeout.
void gateway::drain(int sig) {
    spdlog::info("signal {}: draining for up to {} ms", sig, cfg_->server.drain_timeout.count());
    draining_ = true;
    // First, while the workers still run the calls under way: they finish them.
    if (rls_) rls_->stop(cfg_->server.drain_timeout);
    store_wait_.cancel();
    reload_timer_.cancel();
    upstreams_.stop();
    admin_->stop();
    control_->stop();
    reload_signal_.cancel();
    collect_timer_.cancel();
    auto accepting = std::make_shared<std::size_t>(workers_.size());
    for (auto& w : workers_)
        asio::post(w->ioc, [w = w.get(), this, accepting] {
            // The store's connection keeps the loop busy: stop it once the last request is done.
            w->begin_drain([w] { w->store.stop(); });
            asio::post(main_ioc_, [accepting] {
                if (--*accepting == 0) spdlog::info("stopped accepting; finishing in-flight requests");
            });
        });
    drain_deadline_.expires_after(cfg_->server.drain_timeout);
    drain_deadline_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        spdlog::warn("drain timeout: closing the connections still open");
        for (auto& w : workers_) w->ioc.stop();
    });
}

// Re-reads the file. An invalid file keeps the running config; a valid one becomes the
// snapshot of every request that starts from now on.
reload_result gateway::reload() {
    auto result = load_for_reload(*cfg_);
    if (!result.ok) {
        spdlog::error("reload failed, keeping the running configuration: {}", result.message);
        metrics_.reloaded(false);
        return result;
    }
    std::shared_ptr<const server::snapshot> snap;
    upstream::pool_list pools;
    try {
        pools = upstreams_.build(result.cfg);
        snap = std::make_shared<const server::snapshot>(result.cfg, metrics_, pools);
    } catch (const std::exception& e) {
        result = {false, std::string("reload failed, keeping the running configuration: ") + e.what(), {}, {}};
        spdlog::error("{}", result.message);
        metrics_.reloaded(false);
        return result;
    }
    for (const auto& key : result.restart_required)
        spdlog::warn("reload: {} changed but needs a restart; the running value stays in effect", key);
    cfg_ = result.cfg;
    snap_ = snap;
    upstreams_.install(std::move(pools));
    took_config(*cfg_, metrics_);
    spdlog::set_level(spdlog::level::from_str(cfg_->log.level));
    warn_if_unverified(*cfg_);
    for (auto& w : workers_)
        asio::post(w->ioc, [w = w.get(), snap] {
            w->set_snapshot(snap);
            w->store.on_reload();
        });
    metrics_.reloaded(true);
    spdlog::info("reloaded {}", cfg_->source);
    return result;
}

int gateway::run() {
    if (!start()) return 1;
    // Signals are caught from here on, before the ports are announced: whoever reads the
    // announcement may stop us at once.
    stop_signals_.async_wait([this](boost::system::error_code ec, int sig) {
        if (!ec) drain(sig);
    });
    // A burst of SIGHUPs is one reload, and one more for those that came while it ran (a
    // reload may wait for a file being written). The reload is a timer's, not a post: the
    // signals counted while a reload ran complete the re-armed wait at once, each queued
    // behind the last, and all of them must join the next reload before it begins.
    std::function<void(boost::system::error_code, int)> on_hup = [this, &on_hup](boost::system::error_code ec, int) {
        if (ec) return;
        if (!reload_queued_) {
            reload_queued_ = true;
            reload_timer_.expires_after(std::chrono::milliseconds(1));
            reload_timer_.async_wait([this](boost::system::error_code tec) {
                reload_queued_ = false;
                if (!tec) reload();
            });
        }
        reload_signal_.async_wait(on_hup);
    };
    reload_signal_.async_wait(on_hup);
    // nginx's convention for log rotation: `mv` the file, then SIGUSR1.
    std::function<void(boost::system::error_code, int)> on_usr1 = [this, &on_usr1](boost::system::error_code ec, int) {
        if (ec) return;
        if (access_log_) access_log_->reopen();
        reopen_signal_.async_wait(on_usr1);
    };
    reopen_signal_.async_wait(on_usr1);
    admin_->start();
    control_->start();
    // Printed at any log level: scripts and tests read the port from this line.
    std::fprintf(stderr, "sluice: admin listening on %s\n", to_text(admin_->local_endpoint()).c_str());

    std::vector<std::thread> threads;
    std::size_t running = workers_.size();
    for (std::size_t i = 0; i < redis_.size(); ++i) redis_[i]->start(workers_[i]->ioc.get_executor());
    for (auto& w : workers_) {
        w->start();
        threads.emplace_back([w = w.get(), this, &running] {
            w->ioc.run();
            asio::post(main_ioc_, [this, &running] {
                if (--running == 0) main_ioc_.stop();
            });
        });
    }
    if (memory_) collect_expired();
    wait_for_store(std::chrono::steady_clock::now() + cfg_->store.redis_start_timeout);
    main_ioc_.run();
    rls_.reset();  // before the workers that decide its calls stop
    upstreams_.stop();
    for (auto& w : workers_) w->ioc.stop();
    for (auto& t : threads) t.join();
    metrics_.set_store_gauges(nullptr, nullptr);
    // A Redis connection's socket and timers belong to its worker's io_context: let the
    // stores go first, while every io_context still exists (a drain cut short by
    // drain_timeout leaves them running).
    for (auto& w : workers_) w->forget_leases();
    fallback_.clear();
    redis_.clear();
    workers_.clear();  // their io_contexts, with any handler still parked in a store, go first
    // The last lines written while the signal sets still hold SIGUSR1 (a rotation now must
    // not take the default action and kill the process with lines still buffered).
    access_log_.reset();
    spdlog::info("stopped");
    return exit_code_;
}

}  // namespace

std::string check_config(std::shared_ptr<const config::config> cfg) {
    try {
        metrics::registry m(1);
        server::snapshot snap(std::move(cfg), m);
    } catch (const std::exception& e) {
        return e.what();
    }
    return {};
}

int run_server(std::shared_ptr<const config::config> cfg, unsigned threads) {
    raise_fd_limit();
    gateway g(std::move(cfg), threads);
    return g.run();
}

}  // namespace sluice::app
