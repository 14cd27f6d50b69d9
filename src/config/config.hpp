// Sluice configuration: one YAML file parsed into an immutable `config`.
//
// Contract: load_file()/load_string() either return a fully validated snapshot or throw
// config_error whose what() is "FILE:LINE:COLUMN: key.path: reason". A snapshot is never
// modified after loading; share it as shared_ptr<const config> between threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice::config {

using duration = std::chrono::milliseconds;

// A listen address. `host` is an IP literal without brackets ("0.0.0.0", "::1").
// Port 0 asks the kernel for a free port (tests use it; the chosen port is logged).
struct address {
    std::string host;
    std::uint16_t port = 0;
    std::string to_string() const;  // "127.0.0.1:8080" or "[::1]:8080"
};

// "http://host:port[/base-path]". `host` may be an IP literal or a DNS name.
struct upstream_url {
    std::string host;
    std::uint16_t port = 80;
    std::string base_path;  // "" or "/api" (never ends with '/')
    std::string authority;  // host[:port] as written, for the Host header
};

struct server_config {
    address listen{"0.0.0.0", 8080};
    unsigned threads = 0;  // 0 = hardware threads
    std::size_t max_connections = 10000;
    duration header_timeout = std::chrono::seconds(10);
    duration idle_timeout = std::chrono::seconds(60);
    duration drain_timeout = std::chrono::seconds(10);
    std::size_t max_header_bytes = 16384;
    std::uint64_t max_body_bytes = 10 * 1024 * 1024;
};

struct admin_config {
    address listen{"127.0.0.1", 9090};
};

struct upstream_config {
    upstream_url url;  // required
    duration connect_timeout = std::chrono::seconds(1);
    duration timeout = std::chrono::seconds(30);
    std::size_t max_idle_per_worker = 64;
};

struct log_config {
    std::string level = "info";  // trace | debug | info | warn | error | off
};

struct config {
    std::string source;  // the file it came from
    server_config server;
    admin_config admin;
    upstream_config upstream;
    log_config log;
};

class config_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

std::shared_ptr<const config> load_file(const std::string& path);
std::shared_ptr<const config> load_string(std::string_view yaml, const std::string& name);

// Scalar parsers, exposed for unit tests. Each returns nullopt on any malformed input.
std::optional<duration> parse_duration(std::string_view s);      // "250ms" "1s" "5m" "1h"
std::optional<std::uint64_t> parse_size(std::string_view s);     // "16384" "64KiB" "10MiB" "1GiB"
std::optional<address> parse_address(std::string_view s);        // "0.0.0.0:8080" "[::1]:9090"
std::optional<upstream_url> parse_upstream_url(std::string_view s);

}  // namespace sluice::config
