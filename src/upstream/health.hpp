// Active health checks (`upstreams.<name>.health.path`): once per gateway, not per worker.
//
// Every `interval`, each server of a checked pool's current members gets `GET path` on a
// connection of its own (TLS for an https server), `Connection: close`; the check passes
// when the status line comes within `timeout` (connect, handshake and answer together) with
// a status in `expect_status`. `unhealthy` failures in a row take the server down
// (server::checked_down), `healthy` passes in a row bring it back (and start its slow
// start); each change is logged once. The servers of a pool are checked concurrently; a
// server whose last check still runs skips the tick.
//
// The verdicts and counts live on the server objects (see server's check fields), which the
// registry carries across reloads and DNS changes, so a server taken over keeps its state.
//
// Thread: everything runs on the io_context given (the gateway's main one, the registry's);
// start() and stop() are called there (or before it runs).
#pragma once

#include "upstream/pool.hpp"

#include <boost/asio/io_context.hpp>

#include <memory>
#include <vector>

namespace sluice::upstream {

class health_checker {
public:
    explicit health_checker(boost::asio::io_context& ioc) : ioc_(ioc) {}
    ~health_checker();
    health_checker(const health_checker&) = delete;
    health_checker& operator=(const health_checker&) = delete;

    // Checks the pools of `pools` that have a health.path, from now on, in place of the
    // previous set (checks of that set still running are abandoned, their results unused).
    // The servers of a pool without one are brought up if an earlier check took them down.
    void start(const std::vector<std::shared_ptr<pool>>& pools);
    // Cancels every timer and closes every check's connection; nothing of the checker stays
    // pending on the io_context after the cancelled operations complete.
    void stop();

    struct target;  // one checked pool

private:
    void tick(const std::shared_ptr<target>& t);

    boost::asio::io_context& ioc_;
    std::vector<std::shared_ptr<target>> targets_;
};

}  // namespace sluice::upstream
