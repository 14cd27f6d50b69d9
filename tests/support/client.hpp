// A blocking raw HTTP/1.x test client with timeouts (POSIX sockets + poll()).
//
// Requests are raw bytes, so tests can send anything, malformed input included. Responses are
// parsed with Beast's parser. Every wait is bounded; a timeout throws std::runtime_error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test {

using namespace std::chrono_literals;

using header_list = std::vector<std::pair<std::string, std::string>>;

struct response {
    int status = 0;
    int version = 0;      // 10 or 11
    header_list headers;  // in received order, names as received
    std::string body;

    std::string header(std::string_view name) const;  // case-insensitive, first value, "" if absent
    bool has_header(std::string_view name) const;
    std::size_t count_header(std::string_view name) const;
};

class connection {
public:
    // Connects to host (IP literal or name) within `timeout`; `timeout` also bounds each later
    // send() and read_response() call. `source`: an IP literal to connect from ("127.0.0.2";
    // any address of 127.0.0.0/8 is local on Linux), "" for the kernel's choice.
    connection(std::string host, std::uint16_t port, std::chrono::milliseconds timeout = 10s, std::string source = "");
    ~connection();
    connection(connection&& other) noexcept;
    connection& operator=(connection&& other) noexcept;
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    // Sends all bytes. Throws on timeout or if the peer is gone.
    void send(std::string_view raw);

    // Reads exactly one response (a 1xx interim response is returned as a response of its own).
    // Bytes after it stay buffered for the next call (pipelining) or read_available().
    // `head_request`: the response has no body whatever its headers say.
    // Throws on timeout, on a parse error, or if the connection ends before the response does.
    response read_response(bool head_request = false);

    // True if the peer closes (EOF or reset) within `timeout`. Discards any data received.
    bool wait_closed(std::chrono::milliseconds timeout);

    // Buffered bytes if there are any; otherwise waits up to `timeout` for some bytes and
    // returns what came ("" on timeout or EOF).
    std::string read_available(std::chrono::milliseconds timeout);

    void shutdown_write();
    int fd() const { return fd_; }

private:
    // Appends what one read returns to in_. Returns bytes read (0 = EOF). Throws on timeout.
    std::size_t read_some(std::chrono::steady_clock::time_point deadline);
    void close();

    int fd_ = -1;
    std::chrono::milliseconds timeout_;
    std::string in_;  // received, not yet consumed
};

// "METHOD TARGET HTTP/1.1" with "Host: test" (unless `headers` has a Host), the given headers
// and, when `body` is not empty, Content-Length (unless `headers` has Content-Length or
// Transfer-Encoding; then the body is sent as given).
std::string make_request(std::string method, std::string target, header_list headers = {}, std::string body = "");

// One request on a fresh connection to 127.0.0.1:port.
response fetch(std::uint16_t port, std::string method, std::string target, header_list headers = {},
               std::string body = "");

struct transfer_result {
    int status = 0;
    std::uint64_t body_bytes = 0;
    std::uint64_t body_sum = 0;  // sum of all body byte values
    std::string body_prefix;     // first 64 KiB of the body
    header_list headers;
};

// Expected sum of the pattern bytes 'a' + i % 26 for i in [0, n).
std::uint64_t pattern_sum(std::uint64_t n);

// One request on a fresh connection to 127.0.0.1:port, uploading `upload_bytes` pattern bytes
// ('a' + i % 26) with Content-Length (or chunked; a chunked upload always carries a body, maybe
// empty), while reading the response in bounded memory. Sending stops early if the peer stops
// reading or closes; the call returns once the response is complete. HEAD responses carry no
// body. Throws if nothing moves in either direction for `idle_timeout`.
transfer_result stream_request(std::uint16_t port, std::string method, std::string target, std::uint64_t upload_bytes,
                               bool chunked_upload = false, header_list headers = {},
                               std::chrono::milliseconds idle_timeout = 30s);

}  // namespace sluice::test
