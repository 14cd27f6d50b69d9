// A real Redis Cluster for the end-to-end tests (redis-server --cluster-enabled yes, made
// with redis-cli --cluster create), and what its nodes hold.
#pragma once

#include "e2e.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::test {

// Runs a command to its end (bounded) and returns what it printed.
inline std::string run(std::vector<std::string> argv, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    process p(std::move(argv));
    if (!p.wait_exit(limit)) throw std::runtime_error("command did not finish");
    return p.output();
}

inline std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
        if (!l.empty()) out.push_back(l);
    return out;
}

inline bool can_bind(std::uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

// A node's port: its cluster bus listens 10000 higher, so both must be free. Both are drawn
// below Linux's default ephemeral range (32768 up), where no connection of a test running
// beside this one is given a port; another test's node may still take one between this
// check and redis-server's bind, which the caller retries.
inline std::uint16_t cluster_port() {
    static std::mt19937 rng(std::random_device{}());
    for (int i = 0; i < 1000; ++i) {
        const auto p = static_cast<std::uint16_t>(std::uniform_int_distribution<int>(10000, 22767)(rng));
        if (can_bind(p) && can_bind(static_cast<std::uint16_t>(p + 10000))) return p;
    }
    throw std::runtime_error("no free port pair for a cluster node");
}

// A bucket tier's count from its head field ("<last>;<total>|<newest>/<first>", or
// "<last>;|<newest>|" without an older bucket: the total, or the newest bucket's count);
// 0 when the field is absent.
inline long stored_count(const std::string& hgetall) {
    auto lines = lines_of(hgetall);
    for (std::size_t i = 0; i + 1 < lines.size(); i += 2) {
        if (lines[i].starts_with("@") || lines[i].ends_with("|o")) continue;
        const auto& v = lines[i + 1];
        const auto semi = v.find(';');
        const auto bar = v.find('|', semi);
        const auto bar2 = v.find_first_of("|/", bar + 1);
        if (semi == std::string::npos || bar == std::string::npos || bar2 == std::string::npos) return -1;
        const auto total = v.substr(semi + 1, bar - semi - 1);
        return std::stol(total.empty() ? v.substr(bar + 1, bar2 - bar - 1) : total);
    }
    return 0;
}

// A stored identifier: its key, the primary holding it, its tier's count.
struct stored_key {
    std::string key;
    std::uint16_t port = 0;
    long count = 0;
};

// A cluster of `primaries` primaries with `replicas` replicas each, on loopback ports;
// with `tls`, TLS only (clients, the cluster bus and replication), clients unauthenticated.
struct cluster_nodes {
    cluster_nodes(int primaries, int replicas, const tls_files* tls = nullptr) : dir(make_temp_dir()) {
        if (tls) tls_args = {"--tls", "--cacert", tls->file("ca.pem")};
        const int n = primaries * (1 + replicas);
        for (int i = 0; i < n; ++i) {
            for (int attempt = 1;; ++attempt) {
                const auto port = cluster_port();
                procs.push_back(start_node(port, tls));
                try {
                    procs.back()->wait_for_line("Ready to accept connections");
                    ports.push_back(port);
                    break;
                } catch (const std::runtime_error& e) {
                    procs.pop_back();
                    if (attempt == 5 ||
                        std::string_view(e.what()).find("Address already in use") == std::string_view::npos)
                        throw;
                }
            }
        }
        std::vector<std::string> create{"redis-cli"};
        create.insert(create.end(), tls_args.begin(), tls_args.end());
        create.insert(create.end(), {"--cluster", "create"});
        for (auto port : ports) create.push_back("127.0.0.1:" + std::to_string(port));
        create.insert(create.end(), {"--cluster-replicas", std::to_string(replicas), "--cluster-yes"});
        run(create);
        // Every node agrees the cluster is up, and every primary has its replicas in sync.
        REQUIRE(eventually(
            [&] {
                for (auto port : ports)
                    if (cli(port, {"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos) return false;
                return primary_ports().size() == static_cast<std::size_t>(primaries);
            },
            std::chrono::seconds(30)));
        if (replicas > 0)
            REQUIRE(eventually(
                [&] {
                    for (auto port : ports) {
                        auto info = cli(port, {"INFO", "replication"});
                        if (info.find("role:slave") != std::string::npos &&
                            info.find("master_link_status:up") == std::string::npos)
                            return false;
                    }
                    return true;
                },
                std::chrono::seconds(30)));
    }

    std::unique_ptr<process> start_node(std::uint16_t port, const tls_files* tls) const {
        const auto p = std::to_string(port);
        std::vector<std::string> argv{"redis-server",
                                      "--port",
                                      p,
                                      "--bind",
                                      "127.0.0.1",
                                      "--cluster-enabled",
                                      "yes",
                                      "--cluster-config-file",
                                      dir + "/nodes-" + p + ".conf",
                                      "--cluster-node-timeout",
                                      "1000",
                                      "--dir",
                                      dir,
                                      "--save",
                                      "",
                                      "--appendonly",
                                      "no",
                                      "--maxmemory-policy",
                                      "noeviction"};
        if (tls) {
            argv[2] = "0";
            argv.insert(argv.end(),
                        {"--tls-port", p, "--tls-cluster", "yes", "--tls-replication", "yes", "--tls-cert-file",
                         tls->file("server.pem"), "--tls-key-file", tls->file("server.key"), "--tls-ca-cert-file",
                         tls->file("ca.pem"), "--tls-auth-clients", "no"});
        }
        return std::make_unique<process>(argv);
    }

    std::string cli(std::uint16_t port, std::vector<std::string> args) const {
        std::vector<std::string> argv{"redis-cli", "-p", std::to_string(port)};
        argv.insert(argv.end(), tls_args.begin(), tls_args.end());
        argv.insert(argv.end(), args.begin(), args.end());
        return run(argv, std::chrono::seconds(10));
    }

    std::set<std::uint16_t> primary_ports() const {
        std::set<std::uint16_t> out;
        for (std::size_t i = 0; i < ports.size(); ++i) {
            if (!procs[i]->running()) continue;
            if (cli(ports[i], {"ROLE"}).starts_with("master")) out.insert(ports[i]);
        }
        return out;
    }

    // The keys a primary holds that match `pattern`.
    std::vector<std::string> keys(std::uint16_t port, const std::string& pattern) const {
        return lines_of(cli(port, {"--scan", "--pattern", pattern}));
    }

    // Every key matching `pattern` on the primaries, with its stored count.
    std::vector<stored_key> stored(const std::string& pattern) const {
        std::vector<stored_key> out;
        for (auto port : primary_ports())
            for (const auto& k : keys(port, pattern)) out.push_back({k, port, stored_count(cli(port, {"HGETALL", k}))});
        return out;
    }

    // The port of the primary serving `key` (asked of any node: a MOVED names another).
    std::uint16_t node_of(const std::string& key) const {
        const auto reply = cli(ports[0], {"TYPE", key});
        const auto moved = reply.find("MOVED");
        if (moved == std::string::npos) return ports[0];
        const auto colon = reply.find(':', moved);
        return static_cast<std::uint16_t>(std::stoi(reply.substr(colon + 1)));
    }

    std::string node_id(std::uint16_t port) const {
        auto id = cli(port, {"CLUSTER", "MYID"});
        while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
        return id;
    }

    std::string dir;
    std::vector<std::string> tls_args;  // redis-cli's
    std::vector<std::uint16_t> ports;
    std::vector<std::unique_ptr<process>> procs;
};

}  // namespace sluice::test
