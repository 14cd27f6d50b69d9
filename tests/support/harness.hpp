// Starting the test upstream and the gateway for end-to-end tests.
#pragma once

#include "client.hpp"
#include "process.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::test {

using env_list = std::vector<std::pair<std::string, std::string>>;

// Paths of the binaries under test: the environment variables SLUICE_TEST_GATEWAY_BIN /
// SLUICE_TEST_UPSTREAM_BIN when set (to run the suite against another build, e.g. a baseline),
// else the build's SLUICE_BIN / SLUICE_UPSTREAM_BIN; throw if neither is there.
std::string sluice_bin();
std::string upstream_bin();

// A fresh directory /tmp/sluice-e2e-XXXXXX (mkdtemp).
std::string make_temp_dir();
void write_file(const std::string& path, const std::string& text);  // throws on failure

struct upstream_server {
    explicit upstream_server(std::vector<std::string> argv) : proc(std::move(argv)) {}
    process proc;
    std::uint16_t port = 0;
};

// Runs SLUICE_UPSTREAM_BIN --listen 127.0.0.1:0 and waits for "listening on 127.0.0.1:PORT".
std::unique_ptr<upstream_server> start_upstream();
// The same with arguments added, e.g. {"--name", "a"} or {"--listen", "127.0.0.2:8080"} (a
// later --listen wins); waits for "listening on HOST:PORT" at any address. Throws, with the
// upstream's output, if it exits first (e.g. the port is taken).
std::unique_ptr<upstream_server> start_upstream(std::vector<std::string> extra_args);

struct gateway {
    gateway() = default;
    gateway(const gateway&) = delete;
    gateway& operator=(const gateway&) = delete;
    // Stops the process (SIGTERM, then SIGKILL after 5 s) and removes the temp dir
    // (kept if SLUICE_TEST_KEEP_TMP is set).
    ~gateway();

    std::unique_ptr<process> proc;
    std::uint16_t port = 0;        // proxy port (0 until known)
    std::uint16_t admin_port = 0;  // admin port (0 until known)
    std::uint16_t tls_port = 0;    // server.tls.listen's port (0 without server.tls)
    std::string config_path;       // DIR/sluice.yaml; rewrite it and send SIGHUP to test reloads
    std::string dir;               // the per-gateway temp dir holding the config
};

// Writes yaml_text to a fresh temp dir and runs `SLUICE_BIN --config FILE extra_args...`
// without waiting for anything (ports stay 0). For tests that expect startup to fail.
std::unique_ptr<gateway> launch_gateway(const std::string& yaml_text, std::vector<std::string> extra_args = {},
                                        env_list extra_env = {});

// launch_gateway(), then waits (15 s each) for the log lines "proxy listening on 127.0.0.1:PORT"
// and "admin listening on 127.0.0.1:PORT" and fills in port and admin_port; and when the
// config has server.tls written in block style (a "tls:" line indented under "server:"), for
// "TLS listening on 127.0.0.1:PORT" too, into tls_port. Throws, with the gateway's output, if
// they do not appear (e.g. the gateway exited).
std::unique_ptr<gateway> start_gateway(const std::string& yaml_text, std::vector<std::string> extra_args = {},
                                       env_list extra_env = {});

// Dotted key path -> YAML value written verbatim (quote it yourself if YAML needs quotes).
using yaml_overrides = std::vector<std::pair<std::string, std::string>>;

// A minimal valid gateway config as nested YAML:
//   server:   listen "127.0.0.1:0", threads 2
//   admin:    listen "127.0.0.1:0"
//   upstream: url "http://127.0.0.1:UPSTREAM_PORT"
//   log:      level info   (the listening lines are logged at info)
// Each override sets (or replaces) the value at its dotted path, any depth, creating sections
// as needed; e.g. {{"server.max_body_bytes", "1KiB"}, {"upstream.timeout", "200ms"}}.
// `extra` is appended verbatim after the generated text (for new top-level sections).
std::string gateway_yaml(std::uint16_t upstream_port, const yaml_overrides& overrides = {},
                         const std::string& extra = "");

}  // namespace sluice::test
