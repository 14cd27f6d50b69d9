// Shared pieces of the end-to-end tests: a gateway in front of the test upstream.
#pragma once

#include "../support/client.hpp"
#include "../support/harness.hpp"
#include "../support/process.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <filesystem>
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

// Whether something on 127.0.0.1:port accepts a connection now: a server the test started
// is listening.
inline bool accepts_connections(std::uint16_t port) {
    try {
        connection c("127.0.0.1", port, std::chrono::seconds(1));
        return true;
    } catch (const std::exception&) {
        return false;
    }
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

// What the gateway sends before it closes the connection (bounded by `limit`), and
// whether it closed.
struct ending {
    std::string bytes;
    bool closed = false;
};
inline ending read_to_close(connection& c, std::chrono::milliseconds limit = 10s) {
    ending e;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    char buf[4096];
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return e;
        pollfd p{c.fd(), POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
        const ssize_t n = ::recv(c.fd(), buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            e.bytes.append(buf, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        e.closed = true;  // EOF or reset
        return e;
    }
}

// A request held at the test upstream (/hold) until let go: a concurrency slot, or a slot
// of a pool's max_in_flight, is taken while it runs.
struct held {
    held(std::uint16_t gateway_port, const std::string& name) : conn("127.0.0.1", gateway_port) {
        conn.send(make_request("GET", "/hold?name=" + name));
    }
    connection conn;
};

inline std::int64_t upstream_held(std::uint16_t upstream_port) {
    return json_of(fetch(upstream_port, "GET", "/stats")).at("held").as_int64();
}

inline void let_go(std::uint16_t upstream_port, const std::string& name) {
    REQUIRE(fetch(upstream_port, "GET", "/let-go?name=" + name).body == "1");
}

// HAProxy in TCP mode on 127.0.0.1:port in front of the gateway, sending PROXY headers.
// (Shared by the PROXY protocol and the TLS tests.)
struct haproxy {
    haproxy(std::uint16_t gateway_port, const std::string& send_proxy) : port(unused_port()) {
        if (::system("command -v haproxy >/dev/null 2>&1") != 0)
            FAIL("haproxy is not installed: the PROXY protocol tests need it (scripts/install-deps.sh installs it)");
        dir = make_temp_dir();
        write_file(dir + "/haproxy.cfg",
                   "global\n  maxconn 64\n"
                   "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n"
                   "frontend in\n  bind 127.0.0.1:" +
                       std::to_string(port) +
                       "\n  default_backend gateway\n"
                       "backend gateway\n  server gw 127.0.0.1:" +
                       std::to_string(gateway_port) + " " + send_proxy + "\n");
        proc = std::make_unique<process>(std::vector<std::string>{"haproxy", "-db", "-f", dir + "/haproxy.cfg"});
        // Listening once a connection is accepted (bounded: eventually's 10 s).
        const bool up = eventually([&] { return accepts_connections(port); });
        if (!up) FAIL("haproxy did not listen on port " << port << ":\n" << proc->output());
    }
    ~haproxy() {
        proc.reset();
        std::filesystem::remove_all(dir);
    }
    std::uint16_t port;
    std::string dir;
    std::unique_ptr<process> proc;
};

}  // namespace sluice::test
