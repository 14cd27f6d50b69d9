// The access log: one JSON line per request, written off the event loop in batches.
//
// Each worker appends whole lines to a buffer of its own (its lane; the lane's lock is
// shared only with the writer, once per batch). One writer thread takes every lane's
// buffer at least once per `flush_every`, or sooner when one holds `batch_bytes`, and
// writes it with one write() per lane, so the file only ever receives whole lines and a
// request costs no system call and no thread wake-up. A slow disk never stalls a request:
// past `max_pending_bytes` in one lane, lines are dropped and counted instead.
//
// Rotation: reopen() (SIGUSR1) makes the writer open the path again before its next
// write. A line goes whole to the old file or to the new one, none is lost; once the new
// file exists, every later line goes there.
//
// Privacy: the client's resolved address is a rate-limit identifier and appears only as
// its keyed hash ("id"); "peer" is the TCP peer (the load balancer, behind one).
//
// Thread: lane::write() from its worker's thread; reopen() and dropped() from any thread.
#pragma once

#include "base/units.hpp"

#include <boost/json/serializer.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::server {

struct access_record {
    std::string_view peer, method, path, route, policy, decision;
    std::string_view id_kind;  // "ip", "user" or ""
    std::string id;            // hex of the keyed hash, "" when none
    unsigned status = 0;
    std::uint64_t bytes_in = 0, bytes_out = 0;  // body bytes from and to the client
    std::int64_t upstream_us = -1;              // request sent to response head; -1: not asked
    std::int64_t cost = -1;                     // charged in the end, on a route that settles it; -1: none
    std::string_view upstream, upstream_addr;   // the pool and the server of the last attempt; "" = none
    unsigned attempts = 0;                      // servers tried (a retry elsewhere makes 2)
    std::int64_t total_us = 0;                  // first byte of the request to the response
    std::string_view tls_version, sni;          // a TLS client's ("TLSv1.3", the name asked for); "" = plain
    bool check = false;                         // an HTTP check (service.http_listen): path, method of the original
    std::string_view client;                    // a check's: the client its proxy named ("" = none read)
};

// A call of the rate-limit service (service.grpc_listen): its line has "rls":true. The
// descriptors' values are identifiers and appear only as the keyed hash of the identifier
// they make ("id"); keys are the caller's, cut at max_key_bytes.
struct rls_descriptor_record {
    std::vector<std::string_view> keys;  // in order
    std::string_view matched;            // the matched node's kind ("descriptor:<path>"), "" = none
    std::string id;                      // hex of the identifier's keyed hash, "" when none
    std::string_view code;               // "OK", "OVER_LIMIT"; "" when not answered
};
struct rls_record {
    std::string_view peer;         // as gRPC names it ("ipv4:10.0.0.7:41236")
    std::string_view domain;       // cut at max_key_bytes
    std::string_view code;         // the overall code ("OK", "OVER_LIMIT"); "" when the status is not OK
    std::string_view grpc_status;  // "OK", "DEADLINE_EXCEEDED", ...
    std::vector<rls_descriptor_record> descriptors;  // the first max_descriptors
    std::size_t descriptor_count = 0;                // all the call had
    std::int64_t total_us = 0;                       // arrival to answer
    static constexpr std::size_t max_descriptors = 16, max_keys = 16, max_key_bytes = 64;
};

class access_log {
public:
    static constexpr std::size_t batch_bytes = 64 * base::KiB;
    static constexpr std::size_t max_pending_bytes = 8 * base::MiB;

    class lane {
    public:
        void write(const access_record& r);
        void write(const rls_record& r);

    private:
        friend class access_log;
        explicit lane(access_log& log) : log_(log) {}
        access_log& log_;
        std::mutex mu_;
        std::string pending_;     // whole lines not yet written (guarded by mu_)
        bool signalled_ = false;  // the writer was woken for this batch (guarded by mu_)
        // Append `key` (`,"name":`), then the value as JSON.
        void add_string(std::string_view key, std::string_view s);
        void add_number(std::string_view key, std::int64_t n);
        // The line's start ("time", "peer"), and its end, appended to pending_.
        void begin(std::string_view peer);
        void finish();

        boost::json::serializer json_;  // escapes the strings (worker thread only)
        std::string line_;              // the line being formatted (worker thread only)
        std::int64_t second_ = -1;      // the second `stamp_` holds (worker thread only)
        std::string stamp_;             // "2026-11-22T17:55:41." for second_
    };

    // path: a file, appended to and created if missing, or "-" for stdout. Throws
    // std::system_error naming the path when the file cannot be opened.
    access_log(std::string path, std::size_t workers, std::chrono::milliseconds flush_every = std::chrono::seconds(1));
    // Writes every line still buffered.
    ~access_log();
    access_log(const access_log&) = delete;
    access_log& operator=(const access_log&) = delete;

    lane& lane_of(std::size_t worker) { return *lanes_[worker]; }
    void reopen();
    // Lines lost: dropped while the writer fell behind, or in a write() that failed.
    std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

private:
    void wake();
    void run();
    void write_out(std::string& lines);
    void open_file();

    const std::string path_;
    const std::chrono::milliseconds flush_every_;
    int fd_ = -1;
    std::vector<std::unique_ptr<lane>> lanes_;
    std::atomic<std::uint64_t> dropped_{0};
    std::atomic<bool> reopen_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    bool woken_ = false, stopping_ = false;  // guarded by mu_
    bool failing_ = false;                   // writer thread only: a write failed, reported once
    bool cut_ = false;                       // writer thread only: that write ended mid-line
    std::thread writer_;
};

}  // namespace sluice::server
