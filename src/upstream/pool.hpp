// A pool of upstream servers (config `upstreams.<name>`, or the `upstream:` block), as the
// gateway runs it.
//
// `server` is one address one of the pool's urls resolved to. Its health is the gateway's,
// shared by every worker: written rarely (an active check's verdict, a passive ejection),
// read at each pick, one atomic per item.
//
// `pool` holds the pool's config and its current `members` (the servers as last resolved:
// immutable, replaced whole when DNS gives other addresses; a server whose address stays
// keeps its object, so its health and its workers' idle connections stay too). Workers copy
// `members` when `version()` moves, so the hot path reads no shared pointer.
//
// Thread: `pool` and `server` are shared by every worker, the health checker and the
// resolver; every member is either immutable after publication or atomic.
#pragma once

#include "config/config.hpp"
#include "upstream/balancer.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::upstream {

using clock = std::chrono::steady_clock;

// Nanoseconds of clock, as the atomics hold them.
inline std::int64_t ticks(clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct server {
    server(const config::upstream_server_config& c, boost::asio::ip::tcp::endpoint ep);

    const config::upstream_url url;  // as configured: the Host, SNI and the name verified
    const unsigned weight;
    const boost::asio::ip::tcp::endpoint endpoint;
    const std::string address;  // "127.0.0.1:9001", "[::1]:9001"
    // What /upstreams, metrics and logs call it: the address, after the url's authority
    // when that is a name ("api.internal:8080 10.0.0.7:8080").
    const std::string label;

    // Active checks: down after `unhealthy` failures in a row, until `healthy` passes.
    std::atomic<bool> checked_down{false};
    // Passive: ejected until this tick (0: never ejected).
    std::atomic<std::int64_t> ejected_until{0};
    std::atomic<std::uint32_t> failures{0};          // connect errors or 5xx in a row
    std::atomic<std::uint32_t> ejections_in_row{0};  // doubles eject_for; reset by a success after a return
    std::atomic<std::uint64_t> ejections{0};         // ever
    // When it last came back (from down or ejected), for slow start; 0: never went.
    std::atomic<std::int64_t> back_at{0};

    // Active checks, written by the health checker only (upstream/health.hpp, on the main
    // io_context), read by anyone (/upstreams, metrics). A pass resets the failures and a
    // failure the passes.
    std::atomic<std::uint32_t> check_passes{0};    // consecutive passed checks
    std::atomic<std::uint32_t> check_failures{0};  // consecutive failed checks
    std::atomic<std::int64_t> last_check_ms{0};    // when the last check ended, unix ms; 0: never checked
    // The last check's result: "ok", or why it failed ("status 503", "connect refused",
    // "timeout", "tls handshake failed: ..."); "" before the first.
    std::string last_check() const;
    void set_last_check(std::string result);

    // Neither down nor ejected at `now`.
    bool available(std::int64_t now) const {
        return !checked_down.load(std::memory_order_relaxed) && ejected_until.load(std::memory_order_relaxed) <= now;
    }
    // The weight a balancer gives it at `now`, scaled by 100 (so that slow start can ramp
    // from 10% to 100% in steps): 0 when not available.
    unsigned effective_weight(std::int64_t now, config::duration slow_start) const;

private:
    mutable std::mutex check_mutex_;  // guards last_check_
    std::string last_check_;
};

struct members {
    std::vector<std::shared_ptr<server>> servers;
    hash_ring ring;  // keyed by address: balance hash
};

class pool {
public:
    // `cfg` is owned by the config snapshot that `keep` holds.
    pool(std::shared_ptr<const config::config> keep, const config::upstream_config& cfg);

    const config::upstream_config& cfg() const { return *cfg_; }
    const std::string& name() const { return cfg_->name; }

    std::shared_ptr<const members> current() const;
    std::uint64_t version() const { return version_.load(std::memory_order_acquire); }
    // Replaces the members (the resolver; the registry at a reload).
    void publish(std::shared_ptr<const members> m);

    // Passive health, from any worker: a connect failure or a 5xx from `s`, or a success.
    // Returns true when this failure ejected it (to be logged once, by the caller).
    bool failed(server& s, clock::time_point now);
    void succeeded(server& s);

    // The pool of the same name in the config before a reload: its servers whose url,
    // weight and address are unchanged are taken over, health and all.
    std::shared_ptr<server> take_over(const config::upstream_server_config& c,
                                      const boost::asio::ip::tcp::endpoint& ep) const;

private:
    std::shared_ptr<const config::config> keep_;
    const config::upstream_config* cfg_;
    mutable std::mutex mutex_;  // guards members_ (publish, current: never per request)
    std::shared_ptr<const members> members_;
    std::atomic<std::uint64_t> version_{0};
};

// "127.0.0.1:9001", "[::1]:9001".
std::string address_text(const boost::asio::ip::tcp::endpoint& ep);

// Builds members from resolved servers (their ring too).
std::shared_ptr<const members> make_members(std::vector<std::shared_ptr<server>> servers);

}  // namespace sluice::upstream
