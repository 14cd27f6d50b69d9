// The access log: one JSON line per request, written off the event loop.
//
// Each worker has its own spdlog async logger, with its own queue and writer thread, so a
// slow disk never stalls a request and no lock is shared between workers on the hot
// path; the sink (file or stdout) is shared by the writer threads only. When a queue is
// full the oldest lines are dropped rather than blocking the worker.
//
// Privacy: the client's resolved address is a rate-limit identifier and appears only as
// its keyed hash ("id"); "peer" is the TCP peer (the load balancer, behind one).
//
// Thread: write() from the owning worker's thread.
#pragma once

#include <spdlog/async_logger.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::server {

struct access_record {
    std::string_view peer, method, path, route, policy, decision;
    std::string_view id_kind;  // "ip", "user" or ""
    std::string id;            // hex of the keyed hash, "" when none
    unsigned status = 0;
    std::uint64_t bytes_in = 0, bytes_out = 0;  // body bytes from and to the client
    std::int64_t upstream_us = -1;              // request sent to response head; -1: not asked
    std::int64_t total_us = 0;                  // first byte of the request to the response
};

class access_log {
public:
    // One logger per worker, all on one sink. path: a file, "-" for stdout, "off" for none
    // (then open() returns null). Throws spdlog::spdlog_ex if the file cannot be opened.
    static std::vector<std::unique_ptr<access_log>> open(const std::string& path, std::size_t workers);
    void write(const access_record& r);
    ~access_log();

private:
    access_log(std::shared_ptr<spdlog::details::thread_pool> pool, std::shared_ptr<spdlog::logger> l)
        : pool_(std::move(pool)), logger_(std::move(l)) {}
    std::shared_ptr<spdlog::details::thread_pool> pool_;  // the async logger only holds a weak_ptr
    std::shared_ptr<spdlog::logger> logger_;
    std::string line_;
};

}  // namespace sluice::server
