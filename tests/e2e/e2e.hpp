// Shared pieces of the end-to-end tests: a gateway in front of the test upstream.
#pragma once

#include "../support/client.hpp"
#include "../support/harness.hpp"
#include "../support/process.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

namespace sluice::test {

struct proxy_fixture {
    explicit proxy_fixture(const yaml_overrides& overrides = {}) {
        up = start_upstream();
        gw = start_gateway(gateway_yaml(up->port, overrides));
    }
    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;

    response get(const std::string& target, header_list headers = {}) const {
        return fetch(gw->port, "GET", target, std::move(headers));
    }
    boost::json::object upstream_stats() const {
        return boost::json::parse(fetch(up->port, "GET", "/stats").body).as_object();
    }
    std::string metrics() const { return fetch(gw->admin_port, "GET", "/metrics").body; }
};

inline boost::json::object json_of(const response& r) { return boost::json::parse(r.body).as_object(); }

// The headers the upstream received, as echoed by the test upstream.
inline std::vector<std::pair<std::string, std::string>> echoed_headers(const boost::json::object& echo) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& h : echo.at("headers").as_array()) {
        const auto& pair = h.as_array();
        out.emplace_back(std::string(pair[0].as_string()), std::string(pair[1].as_string()));
    }
    return out;
}

inline std::string echoed(const boost::json::object& echo, std::string name) {
    for (auto& [n, v] : echoed_headers(echo)) {
        if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(),
                                                  [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
            return v;
    }
    return "";
}

// A whole file ("" if it cannot be read).
inline std::string read_file(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

// A metric sample's value from Prometheus text, or -1 if absent.
inline double metric_value(const std::string& text, const std::string& sample) {
    auto pos = text.find("\n" + sample + " ");
    if (pos == std::string::npos) return -1;
    return std::stod(text.substr(pos + sample.size() + 2));
}

// Waits, up to `limit`, for `done()` to hold; returns whether it did. For state another
// process reaches a moment after the client saw its answer (a counter, a log line).
template <class Pred>
bool eventually(Pred&& done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::yield();
    }
    return true;
}

// Request counters are recorded when the last byte of a response has been written, a
// moment after the client may have read it: wait (bounded) for a sample to reach a value.
inline double eventually_metric(std::uint16_t admin_port, const std::string& sample, double expected) {
    double v = -1;
    eventually([&] {
        v = metric_value(fetch(admin_port, "GET", "/metrics").body, sample);
        return v == expected;
    });
    return v;
}

// SHA-256 in hex, as an API key registry names a key.
inline std::string sha256_hex(const std::string& key) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(key.data(), key.size(), d, &n, EVP_sha256(), nullptr);
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < n; ++i) {
        out += hex[d[i] >> 4];
        out += hex[d[i] & 15];
    }
    return out;
}

// Peak resident set of a process in KiB, from /proc.
inline long peak_rss_kib(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

}  // namespace sluice::test

namespace sluice::test {

// A loopback port nothing listens on now (bound, then released).
std::uint16_t unused_port();

// A real redis-server for the test on 127.0.0.1:port, without persistence.
struct redis_server {
    explicit redis_server(std::uint16_t p);
    std::uint16_t port;
    std::unique_ptr<process> proc;
    void stop();  // SIGTERM and wait
};

// A CA, a server certificate for 127.0.0.1 and localhost, a client certificate, and a
// second CA that signed none of them, made with the openssl CLI in a temporary directory
// (removed at the end unless SLUICE_TEST_KEEP_TMP is set).
struct tls_files {
    tls_files();
    ~tls_files();
    tls_files(const tls_files&) = delete;
    tls_files& operator=(const tls_files&) = delete;
    std::string file(const std::string& name) const { return dir + "/" + name; }
    std::string dir;
};

// A JWT signed with HS256 under `secret`: `sub`, an `exp` exp_offset seconds from now, and
// the string claims given.
std::string hs256_token(const std::string& secret, const std::string& sub, long exp_offset,
                        const std::vector<std::pair<std::string, std::string>>& claims = {});

}  // namespace sluice::test
