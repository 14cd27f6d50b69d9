// Every pool of the running config, the gateway's one copy: built at start and at each
// reload (taking over the servers that stay, with their health), and kept resolved: a
// server url whose host is a DNS name is resolved again every `resolve_every` of its pool,
// and the pool's members are replaced when the addresses change. The pools' active health
// checks run here too (health_checker), restarted by install() for the set installed.
//
// Thread: build() and install() on the thread that loads configs, the one that runs the
// io_context given (the gateway's main one), where the re-resolution and the checks run. pools() may be read by any
// thread holding the vector it returned.
#pragma once

#include "upstream/health.hpp"
#include "upstream/pool.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <map>
#include <memory>
#include <set>
#include <vector>

namespace sluice::upstream {

using pool_list = std::vector<std::shared_ptr<pool>>;

class registry {
public:
    explicit registry(boost::asio::io_context& ioc) : ioc_(ioc), timer_(ioc), health_(ioc) {}

    // The pools of `cfg` in its order, each with its servers resolved now (a blocking
    // resolution, at start and reload only). A server of a pool of the same name in the
    // running set is taken over when its url, weight and address are unchanged. Throws
    // std::runtime_error naming the host when a name does not resolve, unless the running
    // pool of that name has addresses for it (then those are kept and a warning logged).
    pool_list build(const std::shared_ptr<const config::config>& cfg) const;
    // Makes `pools` the running set; the re-resolution and the health checks follow it.
    void install(pool_list pools);
    pool_list pools() const { return pools_; }
    // Ends the re-resolution and the health checks (at drain and exit): nothing of the
    // registry keeps the io_context busy once the cancelled operations have completed.
    void stop();

private:
    void tick();
    void resolve(const std::shared_ptr<pool>& p);

    boost::asio::io_context& ioc_;
    boost::asio::steady_timer timer_;
    pool_list pools_;
    std::map<const pool*, clock::time_point> due_;  // when each pool is next resolved
    std::set<const pool*> resolving_;               // pools whose round of resolutions is under way
    bool stopped_ = false;
    health_checker health_;
};

// Whether `host` needs resolving (not an IP literal).
bool is_name(const std::string& host);

}  // namespace sluice::upstream
