// The access log's writer (server/access_log.hpp): whole JSON lines, every one written by
// the time the log is destroyed, strings escaped, the file reopened on request.
#include "server/access_log.hpp"

#include <doctest/doctest.h>
#include <boost/json/parse.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
using sluice::server::access_log;
using sluice::server::access_record;

std::vector<boost::json::object> read_lines(const fs::path& p) {
    std::ifstream in(p);
    std::vector<boost::json::object> out;
    for (std::string line; std::getline(in, line);) out.push_back(boost::json::parse(line).as_object());
    return out;
}

struct temp_dir {
    fs::path path = fs::temp_directory_path() / ("sluice-access-" + std::to_string(::getpid()));
    temp_dir() { fs::create_directories(path); }
    ~temp_dir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("access log: every line of every lane is written whole by the time the log is gone") {
    temp_dir dir;
    const auto file = dir.path / "a.log";
    constexpr int per_lane = 20000;  // several batches of batch_bytes per lane
    {
        access_log log(file.string(), 2, std::chrono::milliseconds(50));
        std::vector<std::thread> workers;
        for (std::size_t w = 0; w < 2; ++w)
            workers.emplace_back([&, w] {
                access_record r;
                r.peer = "127.0.0.1";
                r.method = "GET";
                r.path = w == 0 ? "/zero" : "/one";
                r.decision = "allowed";
                for (int i = 0; i < per_lane; ++i) {
                    r.total_us = i;
                    log.lane_of(w).write(r);
                }
            });
        for (auto& t : workers) t.join();
        CHECK(log.dropped() == 0);
    }
    const auto lines = read_lines(file);
    REQUIRE(lines.size() == 2 * per_lane);
    std::int64_t next[2] = {0, 0};  // each lane's lines stay in order
    for (const auto& l : lines) {
        const int w = l.at("path").as_string() == "/zero" ? 0 : 1;
        CHECK(l.at("total_us").as_int64() == next[w]);
        next[w] = l.at("total_us").as_int64() + 1;
    }
}

TEST_CASE("access log: strings are escaped, upstream_us only when the upstream was asked") {
    temp_dir dir;
    const auto file = dir.path / "b.log";
    {
        access_log log(file.string(), 1);
        access_record r;
        r.path = "/a\"b\\c\x01\n";
        r.id_kind = "ip";
        r.id = "00ff";
        r.status = 429;
        log.lane_of(0).write(r);
        r.upstream_us = 7;
        log.lane_of(0).write(r);
    }
    const auto lines = read_lines(file);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].at("path").as_string() == "/a\"b\\c\x01\n");
    CHECK(lines[0].at("status").as_int64() == 429);
    CHECK_FALSE(lines[0].contains("upstream_us"));
    CHECK(lines[1].at("upstream_us").as_int64() == 7);
    CHECK(lines[1].at("time").as_string().size() == std::string_view("2026-11-22T17:55:41.228Z").size());
}

TEST_CASE("access log: reopen() after a move writes the next lines to a new file at the path") {
    temp_dir dir;
    const auto file = dir.path / "c.log", moved = dir.path / "c.log.1";
    access_log log(file.string(), 1, std::chrono::milliseconds(10));
    access_record r;
    r.path = "/before";
    log.lane_of(0).write(r);
    fs::rename(file, moved);
    log.reopen();
    for (int i = 0; i < 500 && !fs::exists(file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(fs::exists(file));  // reopened: from here on, every line goes there
    r.path = "/after";
    log.lane_of(0).write(r);
    for (int i = 0; i < 500 && read_lines(file).size() + read_lines(moved).size() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto now = read_lines(file), old = read_lines(moved);
    CHECK(now.size() + old.size() == 2);
    REQUIRE_FALSE(now.empty());
    CHECK(now.back().at("path").as_string() == "/after");
}

TEST_CASE("access log: a path that cannot be opened is refused, naming it") {
    CHECK_THROWS_WITH_AS(access_log("/nonexistent-dir/x.log", 1), doctest::Contains("/nonexistent-dir/x.log"),
                         std::system_error);
}

TEST_CASE("access log: a rate-limit call's line is bounded: 16 descriptors, 16 keys, keys cut at 64 bytes") {
    using sluice::server::rls_record;
    temp_dir dir;
    const auto file = dir.path / "rls.log";
    const std::string long_key = std::string(63, 'k') + "\xc3\xa9" + "tail";  // é straddles byte 64
    {
        access_log log(file.string(), 1);
        rls_record r;
        r.peer = "ipv4:127.0.0.1:5000";
        r.domain = "api\"\n";
        r.grpc_status = "OK";
        r.code = "OK";
        r.descriptor_count = 20;
        r.descriptors.resize(20);
        for (auto& d : r.descriptors) d.keys.assign(20, "key");
        r.descriptors[0].keys[0] = long_key;
        r.descriptors[0].matched = "descriptor:key";
        r.descriptors[0].id = "00ff";
        r.descriptors[0].code = "OVER_LIMIT";
        log.lane_of(0).write(r);
    }
    const auto lines = read_lines(file);
    REQUIRE(lines.size() == 1);
    const auto& l = lines[0];
    CHECK(l.at("rls").as_bool());
    CHECK(l.at("domain").as_string() == "api\"\n");
    CHECK(l.at("descriptor_count").as_int64() == 20);
    const auto& ds = l.at("descriptors").as_array();
    REQUIRE(ds.size() == 16);
    const auto& first = ds[0].as_object();
    REQUIRE(first.at("keys").as_array().size() == 16);
    CHECK(first.at("keys").as_array()[0].as_string() == std::string(63, 'k'));  // not half of é
    CHECK(first.at("matched").as_string() == "descriptor:key");
    CHECK(first.at("id").as_string() == "00ff");
    CHECK(first.at("code").as_string() == "OVER_LIMIT");
    CHECK_FALSE(ds[1].as_object().contains("matched"));
    CHECK(l.at("code").as_string() == "OK");
    CHECK(l.at("grpc_status").as_string() == "OK");
}
