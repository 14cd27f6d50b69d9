// Operations, through the real gateway binary: configuration reload (also of files cut short
// or written in place), --check, signals at start-up, the access log, one owner per port, and
// the memory store under key explosion.
#include "../support/probe.hpp"
#include "e2e.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

using namespace sluice::test;

namespace {

std::string limits_yaml(int limit, const std::string& headers = "ietf") {
    return "response: { headers: " + headers + " }\npolicies:\n  p:\n    ip: [ {limit: " + std::to_string(limit) +
           ", per: 1h, precision: 6m} ]\nroutes:\n  - { match: { path_prefix: / }, policy: p }\n";
}

int reloads_ok(const gateway& gw) {
    return static_cast<int>(
        metric_value(fetch(gw.admin_port, "GET", "/metrics").body, R"(sluice_config_reloads_total{result="ok"})"));
}

}  // namespace

TEST_CASE("SIGHUP reloads the file, limit state survives for unchanged tier ids") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {}, limits_yaml(1)));
    CHECK(fetch(gw->port, "GET", "/").status == 200);
    CHECK(fetch(gw->port, "GET", "/").status == 429);

    write_file(gw->config_path, gateway_yaml(up->port, {}, limits_yaml(3)));
    gw->proc->signal(SIGHUP);
    gw->proc->wait_for_line("reloaded ");
    // One of the three was used before the reload: two are left, not three.
    CHECK(fetch(gw->port, "GET", "/").status == 200);
    CHECK(fetch(gw->port, "GET", "/").status == 200);
    CHECK(fetch(gw->port, "GET", "/").status == 429);
    CHECK(reloads_ok(*gw) == 1);
}

TEST_CASE("POST /reload: valid, invalid (old config kept), restart-only keys reported") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {}, limits_yaml(100)));
    CHECK(fetch(gw->port, "GET", "/").header("RateLimit-Policy") == R"("ip-1h";q=100;w=3600)");

    write_file(gw->config_path, gateway_yaml(up->port, {}, limits_yaml(100, "legacy")));
    auto ok = fetch(gw->admin_port, "POST", "/reload");
    CHECK(ok.status == 200);
    CHECK(json_of(ok).at("status").as_string() == "reloaded");
    auto legacy = fetch(gw->port, "GET", "/");
    CHECK(legacy.header("X-RateLimit-Limit") == "100");
    CHECK_FALSE(legacy.has_header("RateLimit-Policy"));

    write_file(gw->config_path, gateway_yaml(up->port, {}, limits_yaml(100) + "bogus_key: 1\n"));
    auto bad = fetch(gw->admin_port, "POST", "/reload");
    CHECK(bad.status == 422);
    auto message = std::string(json_of(bad).at("message").as_string());
    CHECK(std::regex_search(message, std::regex(gw->config_path + R"(:\d+:\d+: bogus_key: unknown key)")));
    CHECK(fetch(gw->port, "GET", "/").header("X-RateLimit-Limit") == "100");  // still the last good one
    CHECK(metric_value(fetch(gw->admin_port, "GET", "/metrics").body,
                       R"(sluice_config_reloads_total{result="error"})") == 1);
    // The log line reaches the test through a pipe, a moment after the answer.
    CHECK(eventually([&] {
        return gw->proc->output().find("reload failed, keeping the running configuration") != std::string::npos;
    }));

    write_file(gw->config_path, gateway_yaml(up->port, {{"server.listen", "\"127.0.0.1:1\""}, {"server.threads", "3"}},
                                             limits_yaml(100, "legacy")));
    auto restart = fetch(gw->admin_port, "POST", "/reload");
    REQUIRE(restart.status == 200);
    auto restart_body = json_of(restart);
    const auto& keys = restart_body.at("restart_required").as_array();
    CHECK(keys.size() == 2);
    CHECK(std::find(keys.begin(), keys.end(), boost::json::value("server.listen")) != keys.end());
    CHECK(fetch(gw->port, "GET", "/").status == 200);  // still on the port it started with
}

TEST_CASE("reloading under load fails no request") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {}, limits_yaml(1000000)));
    std::atomic<int> ok{0}, failed{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c)
        clients.emplace_back([&] {
            try {
                connection conn("127.0.0.1", gw->port);
                for (int i = 0; i < 2000 && !stop; ++i) {
                    conn.send(make_request("GET", "/load"));
                    (conn.read_response().status == 200 ? ok : failed)++;
                }
            } catch (const std::exception&) {
                failed++;
            }
        });
    for (int i = 0; i < 6; ++i) {
        write_file(gw->config_path, gateway_yaml(up->port, {}, limits_yaml(1000000 + i, i % 2 ? "legacy" : "ietf")));
        CHECK(fetch(gw->admin_port, "POST", "/reload").status == 200);
    }
    stop = true;
    for (auto& t : clients) t.join();
    CHECK(failed == 0);
    CHECK(ok > 0);
    CHECK(reloads_ok(*gw) == 6);
}

namespace {

// A key registry in block style, one entry per key: a cut inside an entry still parses, and
// drops its plan or shortens its user (cust22 becomes cust2 or cust, two other customers).
std::string block_registry(const std::vector<std::pair<std::string, std::string>>& keys_users) {
    std::string out;
    for (const auto& [key, user] : keys_users)
        out += "- sha256: " + sha256_hex(key) + "\n  user: " + user + "\n  plan: pro\n";
    return out;
}

// Registry version i: a key of its own first, then the keys every version has.
std::string registry_version(int i) {
    return block_registry({{"rotating-" + std::to_string(i), "rot"},
                           {"key-cust22", "cust22"},
                           {"key-cust2", "cust2"},
                           {"key-cust", "cust"}});
}

}  // namespace

// Issue 21 item 5: a registry rewritten in place and read by a reload in the middle of the
// write lost the keys after the cut (401), or an entry's plan, or the end of its user name.
// Here it is rewritten in place (truncate, half, flush, the rest) over and over while SIGHUP
// comes every 20 ms; now and then a version is left alone long enough to settle, so that
// reloads do succeed meanwhile. A key in every version must always be known, on its plan, and spend its own
// user's budget only: the tier of plan `pro` is the only one with that limit, and each
// user's remaining count drops by one per request of its own key, never more.
TEST_CASE("reload: a key registry rewritten in place is never half-applied") {
    auto up = start_upstream();
    const auto dir = make_temp_dir();
    const std::string keys = dir + "/keys.yaml";
    write_file(keys, registry_version(0));
    auto gw = start_gateway(gateway_yaml(up->port, {}, R"(
response: { headers: legacy }
clients:
  user:
    api_key_header: X-API-Key
    api_keys: { file: ")" + keys + R"(", require_known: true }
    default_plan: trap
plans:
  pro: { user: [ {limit: 1000000, per: 1d, algorithm: fixed} ] }
  trap: { user: [ {limit: 5, per: 1d, algorithm: fixed} ] }
policies:
  p: { user: plan }
routes:
  - { match: { path_prefix: / }, policy: p }
)"));

    std::atomic<bool> writing{true};
    std::atomic<int> versions{0};
    std::thread writer([&] {
        const auto end = std::chrono::steady_clock::now() + 2s;
        for (int i = 1; std::chrono::steady_clock::now() < end; ++i) {
            const std::string text = registry_version(i);
            const std::size_t cut = static_cast<std::size_t>(i) * 37 % text.size();
            std::ofstream out(keys, std::ios::binary | std::ios::trunc);
            out << text.substr(0, cut) << std::flush;
            std::this_thread::sleep_for(2ms);
            out << text.substr(cut);
            out.close();
            versions = i;
            // Pacing: about 200 ms of versions back to back, then one left alone long enough to settle.
            std::this_thread::sleep_for(i % 40 == 0 ? 150ms : 3ms);
        }
        writing = false;
    });

    int requests = 0, wrong_status = 0, wrong_plan = 0, overspent = 0;
    std::string first_wrong;
    std::thread client([&] {
        const std::vector<std::string> stable{"key-cust22", "key-cust2", "key-cust"};
        std::vector<long> remaining(stable.size(), -1);
        while (writing) {
            for (std::size_t k = 0; k < stable.size(); ++k) {
                response r;
                try {
                    r = fetch(gw->port, "GET", "/", {{"X-API-Key", stable[k]}});
                } catch (const std::exception& e) {
                    r.body = e.what();
                }
                ++requests;
                if (r.status != 200 || r.header("X-RateLimit-Limit") != "1000000") {
                    ++(r.status != 200 ? wrong_status : wrong_plan);
                    if (first_wrong.empty())
                        first_wrong = stable[k] + ": " + std::to_string(r.status) + " limit " +
                                      r.header("X-RateLimit-Limit") + " " + r.body;
                    continue;
                }
                const long left = std::stol(r.header("X-RateLimit-Remaining"));
                // One less than before, or more (the day's window turned over).
                if (remaining[k] >= 0 && left != remaining[k] - 1 && left < remaining[k]) ++overspent;
                remaining[k] = left;
            }
        }
    });

    int reloaded_while_writing = 0;
    for (int i = 1; writing; ++i) {
        gw->proc->signal(SIGHUP);
        std::this_thread::sleep_for(20ms);
        if (i % 25 == 0) reloaded_while_writing = reloads_ok(*gw);
    }
    writer.join();
    client.join();

    CAPTURE(first_wrong);
    CHECK(requests > 100);
    CHECK(wrong_status == 0);
    CHECK(wrong_plan == 0);
    CHECK(overspent == 0);
    CHECK(reloaded_while_writing >= 1);
    // The last version, now complete and still, is the one a reload applies.
    CHECK(fetch(gw->admin_port, "POST", "/reload").status == 200);
    CHECK(fetch(gw->port, "GET", "/", {{"X-API-Key", "rotating-" + std::to_string(versions.load())}}).status == 200);
    CHECK(fetch(gw->port, "GET", "/", {{"X-API-Key", "rotating-" + std::to_string(versions.load() - 1)}}).status ==
          401);
    gw.reset();  // SIGHUPs still queued would find the file gone
    std::filesystem::remove_all(dir);
}

TEST_CASE("access log: one JSON line per request, identifiers hashed") {
    auto up = start_upstream();
    auto dir = make_temp_dir();
    const std::string log_path = dir + "/access.log";
    auto gw = start_gateway(gateway_yaml(up->port, {{"log.access.path", "\"" + log_path + "\""}},
                                         "clients: { user: { api_key_header: X-API-Key } }\n"
                                         "policies:\n  p:\n    user: [ {limit: 1, per: 1h, precision: 6m} ]\n"
                                         "routes:\n  - { match: { path_prefix: /api }, policy: p }\n"));
    CHECK(fetch(gw->port, "GET", "/api/items?token=hidden", {{"X-API-Key", "very-secret-key"}}).status == 200);
    CHECK(fetch(gw->port, "POST", "/api/items", {{"X-API-Key", "very-secret-key"}}, "12345").status == 429);
    CHECK(fetch(gw->port, "GET", "/other").status == 200);

    std::vector<boost::json::object> lines;
    eventually([&] {  // lines are written by the access log's own thread
        lines.clear();
        std::istringstream in(read_file(log_path));
        for (std::string line; std::getline(in, line);)
            if (!line.empty() && line.back() == '}') lines.push_back(boost::json::parse(line).as_object());
        return lines.size() >= 3;
    });
    REQUIRE(lines.size() == 3);
    // Each worker writes through its own queue and thread: lines may come in any order.
    auto line_with = [&](const char* decision) -> const boost::json::object& {
        for (const auto& l : lines)
            if (l.at("decision").as_string() == decision) return l;
        FAIL("no access log line with decision ", decision);
        return lines[0];
    };
    const auto& allowed = line_with("allowed");
    CHECK(allowed.at("method").as_string() == "GET");
    CHECK(allowed.at("path").as_string() == "/api/items");
    CHECK(allowed.at("route").as_string() == "/api*");
    CHECK(allowed.at("policy").as_string() == "p");
    CHECK(allowed.at("decision").as_string() == "allowed");
    CHECK(allowed.at("status").to_number<int>() == 200);
    CHECK(allowed.at("id_kind").as_string() == "user");
    CHECK(std::regex_match(std::string(allowed.at("id").as_string()), std::regex("[0-9a-f]{32}")));
    CHECK(allowed.at("bytes_out").to_number<int>() > 0);
    CHECK(allowed.at("upstream_us").to_number<std::int64_t>() >= 0);
    CHECK(allowed.at("upstream").as_string() == "default");
    CHECK(allowed.at("upstream_addr").as_string() == "127.0.0.1:" + std::to_string(up->port));
    CHECK(allowed.at("attempts").to_number<int>() == 1);
    CHECK(allowed.at("total_us").to_number<std::int64_t>() >= allowed.at("upstream_us").to_number<std::int64_t>());
    CHECK(std::regex_match(std::string(allowed.at("time").as_string()),
                           std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
    const auto& limited = line_with("limited");
    CHECK(limited.at("decision").as_string() == "limited");
    CHECK(limited.at("status").to_number<int>() == 429);
    CHECK(limited.at("id") == allowed.at("id"));
    CHECK_FALSE(limited.contains("upstream_us"));
    CHECK_FALSE(limited.contains("upstream_addr"));
    CHECK(line_with("none").at("route").as_string() == "unmatched");

    auto text = read_file(log_path);
    CHECK(text.find("very-secret-key") == std::string::npos);
    CHECK(text.find("hidden") == std::string::npos);
}

namespace {

// The lines of an access log file; `cut` counts those that are not a whole JSON object.
std::size_t json_lines(const std::string& path, std::size_t& cut) {
    std::istringstream in(read_file(path));
    std::size_t n = 0;
    for (std::string line; std::getline(in, line); ++n) {
        boost::system::error_code ec;
        if (auto v = boost::json::parse(line, ec); ec || !v.is_object()) ++cut;
    }
    return n;
}

}  // namespace

TEST_CASE("access log: rotated by mv then SIGUSR1, no line lost or cut") {
    auto up = start_upstream();
    auto dir = make_temp_dir();
    const std::string log_path = dir + "/access.log", rotated = dir + "/access.log.1";
    auto gw =
        start_gateway(gateway_yaml(up->port, {{"log.access.path", "\"" + log_path + "\""}, {"server.threads", "2"}}));
    constexpr int before = 200, after = 100;
    auto send = [&](int n) {
        std::vector<std::thread> clients;
        for (int c = 0; c < 4; ++c)
            clients.emplace_back([&] {
                for (int i = 0; i < n / 4; ++i) CHECK(fetch(gw->port, "GET", "/r").status == 200);
            });
        for (auto& t : clients) t.join();
    };
    send(before);
    // Moved while lines may still be buffered: those go to whichever file is open when written.
    REQUIRE(std::rename(log_path.c_str(), rotated.c_str()) == 0);
    gw->proc->signal(SIGUSR1);
    REQUIRE(eventually([&] { return std::filesystem::exists(log_path); }));
    send(after);
    std::size_t old_lines = 0, new_lines = 0, cut = 0;
    CHECK(eventually([&] {
        cut = 0;
        old_lines = json_lines(rotated, cut);
        new_lines = json_lines(log_path, cut);
        return old_lines + new_lines >= before + after;
    }));
    CHECK(cut == 0);
    CHECK(old_lines + new_lines == before + after);
    CHECK(new_lines >= after);  // every request after the reopen is in the new file
    CHECK(gw->proc->running());
}

TEST_CASE("a second gateway on a listen address already in use refuses to start and names it") {
    auto up = start_upstream();
    auto first = start_gateway(gateway_yaml(up->port));
    const std::string taken = "127.0.0.1:" + std::to_string(first->port);
    auto second = launch_gateway(gateway_yaml(up->port, {{"server.listen", "\"" + taken + "\""}}));
    const auto status = second->proc->wait_exit(15s);
    REQUIRE(status.has_value());
    CHECK(*status == 1);
    const auto out = second->proc->output();
    CHECK(out.find(taken) != std::string::npos);
    CHECK(out.find("already in use") != std::string::npos);
    CHECK(out.find("proxy listening") == std::string::npos);
    // The first one keeps every connection to itself.
    for (int i = 0; i < 20; ++i) CHECK(fetch(first->port, "GET", "/").status == 200);
}

namespace {

double metric_of(const gateway& gw, const std::string& sample) {
    return metric_value(fetch(gw.admin_port, "GET", "/metrics").body, sample);
}

}  // namespace

// A file cut short before `policies:` still parses (YAML has no terminator); the
// reload accepted it and every limit disappeared. It must be refused, by SIGHUP and by
// POST /reload alike, and counted as a failed reload.
TEST_CASE("a reload of a file cut before its policies is refused") {
    auto up = start_upstream();
    const std::string full = gateway_yaml(up->port, {}, R"(
policies:
  p:
    ip: [ {limit: 1, per: 1h, precision: 6m} ]
routes:
  - { match: { path_prefix: / }, policy: p }
)");
    auto gw = start_gateway(full);
    INFO("gateway output:\n", gw->proc->output());
    CHECK(fetch(gw->port, "GET", "/").status == 200);
    CHECK(fetch(gw->port, "GET", "/").status == 429);

    const auto cut = full.substr(0, full.find("policies:"));
    REQUIRE(cut.size() < full.size());
    write_file(gw->config_path, cut);
    gw->proc->signal(SIGHUP);
    gw->proc->wait_for_line("reloaded |reload failed");
    CHECK(fetch(gw->port, "GET", "/").status == 429);  // the limit still applies
    CHECK(metric_of(*gw, R"(sluice_config_reloads_total{result="error"})") == 1);

    auto answer = fetch(gw->admin_port, "POST", "/reload");
    CHECK(answer.status >= 400);
    CHECK(answer.status < 500);
    CHECK(answer.header("Content-Type") == "application/json");
    if (answer.status >= 400) CHECK(!std::string(json_of(answer).at("message").as_string()).empty());
    CHECK(fetch(gw->port, "GET", "/").status == 429);
    CHECK(metric_of(*gw, R"(sluice_config_reloads_total{result="error"})") == 2);
    CHECK(metric_of(*gw, R"(sluice_config_reloads_total{result="ok"})") <= 0);  // -1: no such series
}

// Finding 11, first part. A duration near the clock's range (2562047h is about 2^63 ns)
// overflowed the deadlines computed from it; --check must refuse it, naming the key.
TEST_CASE("--check refuses a duration that would overflow the clock") {
    auto up = start_upstream();
    auto gw = launch_gateway(gateway_yaml(up->port, {{"server.idle_timeout", "2562047h"}}), {"--check"});
    const auto status = gw->proc->wait_exit(10s);
    const auto out = gw->proc->output();
    CAPTURE(out);
    CHECK(status.value_or(-1) == 1);
    CHECK(out.find("server.idle_timeout") != std::string::npos);
    CHECK(out.find(": ok") == std::string::npos);
}

// Finding 11, second part. The admin listener closed malformed requests silently.
TEST_CASE("the admin listener answers a malformed request with 400") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port));
    for (const char* raw : {"GARBAGE\r\n\r\n", "GET /metrics HTTP/1.1\r\nHost: t\r\nBad Header Line\r\n\r\n"}) {
        CAPTURE(raw);
        std::optional<int> status;
        try {
            connection c("127.0.0.1", gw->admin_port, 5s);
            c.send(raw);
            status = c.read_response().status;
        } catch (const std::exception& e) {
            MESSAGE("no answer: ", std::string(e.what()));
        }
        CHECK(status.value_or(-1) == 400);
    }
    CHECK(fetch(gw->admin_port, "GET", "/healthz").status == 200);
}

// Finding 11, third part. A SIGHUP that arrived before the reload handler was installed (a
// deploy script reloading a gateway that is still starting) killed the process. The config
// file is a FIFO here: while the gateway is blocked reading it, it is surely past exec and in
// its own code, and the SIGHUP lands before the handler exists.
TEST_CASE("a SIGHUP during start-up does not kill the gateway") {
    auto up = start_upstream();
    const std::string yaml = gateway_yaml(up->port);
    // Writing to the FIFO after the gateway died must fail with EPIPE, not kill this process.
    struct ignore_sigpipe {
        ignore_sigpipe() : old(std::signal(SIGPIPE, SIG_IGN)) {}
        ~ignore_sigpipe() { std::signal(SIGPIPE, old); }
        void (*old)(int);
    } guard;
    for (int round = 0; round < 3; ++round) {
        CAPTURE(round);
        const std::string dir = make_temp_dir();
        const std::string fifo = dir + "/sluice.yaml";
        REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
        process gw({sluice_bin(), "--config", fifo});
        int fd = -1;
        // A non-blocking open for writing succeeds once the gateway has opened the FIFO to read.
        eventually([&] {
            fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
            return fd >= 0 || !gw.running();
        });
        REQUIRE(fd >= 0);
        gw.signal(SIGHUP);
        const ssize_t written = ::write(fd, yaml.data(), yaml.size());
        ::close(fd);
        CHECK(written == static_cast<ssize_t>(yaml.size()));
        std::optional<std::string> port;
        try {
            port = gw.wait_for_line(R"(proxy listening on 127\.0\.0\.1:(\d+))").at(1);
        } catch (const std::exception&) {
            // 129 = 128 + SIGHUP: the signal's default action ended the process
            FAIL_CHECK("no listening line; the gateway exited with status ", gw.wait_exit(5s).value_or(-1));
        }
        if (port) {
            CHECK(gw.running());
            CHECK(fetch(static_cast<std::uint16_t>(std::stoi(*port)), "GET", "/").status == 200);
        }
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }
}

// Key explosion: 16k distinct client addresses, 4 x max_keys (from a trusted
// proxy's X-Forwarded-For, pipelined on 4 connections; a 60 s bound only stops a hung run).
// store.memory.max_keys (4000) bounds the identifiers held; the gateway's peak resident set
// grows by less than 64 MiB (192 MiB under ASan; the state of 4000 identifiers is about 1 MiB);
// and once their windows (2 s) have passed, the expired identities are swept without new
// traffic: sluice_store_keys falls to 0.
TEST_CASE("key explosion: bounded memory, expired identities swept without traffic") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port,
                                         {{"store.memory.max_keys", "4000"},
                                          {"clients.trusted_proxies", "[\"127.0.0.1/32\"]"},
                                          {"log.access.path", "off"}},
                                         R"(
policies:
  p:
    ip: [ {limit: 5, per: 2s, precision: 200ms} ]
routes:
  - { match: { path_prefix: / }, policy: p }
)"),
                            {}, bounded_quarantine_env());
    INFO("gateway output:\n", gw->proc->output());
    REQUIRE(fetch(gw->port, "GET", "/status?code=204").status == 204);
    const long before = proc_status_kib(gw->proc->pid(), "VmHWM");

    constexpr int identities = 16000, batch = 100, senders = 4;
    std::atomic<int> next{0}, answered{0}, failed{0};
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    std::vector<std::thread> threads;
    for (int t = 0; t < senders; ++t)
        threads.emplace_back([&] {
            try {
                connection c("127.0.0.1", gw->port, 10s);
                while (std::chrono::steady_clock::now() < deadline) {
                    const int first = next.fetch_add(batch);
                    if (first >= identities) break;
                    std::string pipelined;
                    for (int i = first; i < first + batch; ++i)
                        pipelined += "GET /status?code=204 HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 10." +
                                     std::to_string((i >> 16) & 255) + "." + std::to_string((i >> 8) & 255) + "." +
                                     std::to_string(i & 255) + "\r\n\r\n";
                    c.send(pipelined);
                    for (int i = 0; i < batch; ++i) (c.read_response().status == 204 ? answered : failed)++;
                }
            } catch (const std::exception&) {
                ++failed;
            }
        });
    for (auto& t : threads) t.join();
    const long after = proc_status_kib(gw->proc->pid(), "VmHWM");
    const double keys_at_end = metric_of(*gw, "sluice_store_keys");
    CAPTURE(answered.load());
    CAPTURE(before);
    CAPTURE(after);
    CAPTURE(keys_at_end);
    CHECK(failed == 0);
    REQUIRE(answered == identities);  // enough distinct identities to fill max_keys four times
    CHECK(keys_at_end <= 4000);
    CHECK(after - before < (runs_with_asan(gw->proc->pid()) ? 192 : 64) * 1024);

    // No traffic from here on: the windows pass and the sweep collects every identity.
    double keys = keys_at_end;
    CHECK(eventually(
        [&] {
            keys = metric_of(*gw, "sluice_store_keys");
            return keys == 0;
        },
        8s));
    CAPTURE(keys);
    CHECK(keys == 0);
}

// A reload waits for a file being written to hold still (100 ms unchanged, at most 1 s):
// signals that come meanwhile must join one reload, not queue one each.
TEST_CASE("a burst of SIGHUPs during a slow reload is one reload more, not one per signal") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {}, limits_yaml(5)));
    const auto reloads = [&] {
        const auto m = fetch(gw->admin_port, "GET", "/metrics").body;
        return static_cast<int>(metric_value(m, R"(sluice_config_reloads_total{result="ok"})") +
                                metric_value(m, R"(sluice_config_reloads_total{result="error"})"));
    };
    const int before = reloads();
    // Ten signals, each after a rewrite of the file: the first reload waits for the file all
    // along, however slowly the signals come.
    const auto yaml = gateway_yaml(up->port, {}, limits_yaml(6));
    for (int i = 0; i < 10; ++i) {
        write_file(gw->config_path, yaml);
        gw->proc->signal(SIGHUP);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // pacing the sender, not waiting on it
    }
    REQUIRE(eventually([&] { return reloads() > before; }));
    // The subject of the test is a stretch of time in which no more reloads may come.
    const auto quiet_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (std::chrono::steady_clock::now() < quiet_until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int n = reloads() - before;
    CHECK(n >= 1);
    CHECK(n <= 6);  // one per signal was 10 or 11; 2 to 4 seen here (4 under ASan on a loaded machine)
    CHECK(reloads_ok(*gw) >= 1);
}
