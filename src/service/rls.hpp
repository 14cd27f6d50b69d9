// Envoy's rate-limit service (RLS v3) over gRPC: /envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit on service.grpc_listen.
//
// grpc++ runs its own threads. A call is handed to a worker's io_context (round robin), whose
// store decides it (limit/descriptors.hpp: every descriptor of the call one check_request) and
// which finishes the call from there: no store connection is touched by a gRPC thread.
//
// Thread: start() and stop() on the main thread; calls on gRPC's threads, then on a worker's.
#pragma once

#include "config/config.hpp"
#include "server/worker.hpp"

#include <memory>
#include <string>
#include <vector>

namespace sluice::service {

class rls_server {
public:
    // The workers outlive the server (stop() first). `max_calls`: service.max_concurrent_calls.
    rls_server(std::vector<server::worker*> workers, std::size_t max_calls);
    ~rls_server();
    rls_server(const rls_server&) = delete;
    rls_server& operator=(const rls_server&) = delete;

    // Listens on `at` (port 0: the kernel's choice); the address bound. Throws std::runtime_error
    // when it cannot listen.
    std::string start(const config::address& at);
    // Stops accepting calls and waits, up to `grace`, for the calls under way (the workers
    // must still run them); past it they are cancelled.
    void stop(config::duration grace);

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace sluice::service
