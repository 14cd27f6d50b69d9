#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace cfg = sluice::config;
using namespace std::chrono_literals;

namespace {

const std::string fixtures_dir = std::string(SLUICE_TEST_DIR) + "/config/fixtures";

// The what() of the config_error that loading throws, or a marker if nothing is thrown.
template <class Load>
std::string error_of(Load load) {
    try {
        load();
    } catch (const cfg::config_error& e) {
        return e.what();
    }
    return "<no error>";
}

std::string file_error(const std::string& path) {
    return error_of([&] { cfg::load_file(path); });
}

std::string string_error(const std::string& yaml) {
    return error_of([&] { cfg::load_string(yaml, "inline.yaml"); });
}

// A fixture's expectation: its first line is "# expect: <message>", where the message
// says FILE for the path given to load_file.
std::string expectation_of(const std::filesystem::path& fixture) {
    std::ifstream in(fixture);
    std::string first;
    std::getline(in, first);
    const std::string prefix = "# expect: FILE";
    if (first.rfind(prefix, 0) != 0) return "<fixture lacks '" + prefix + "' on line 1>";
    return fixture.string() + first.substr(prefix.size());
}

std::vector<std::filesystem::path> error_fixtures() {
    std::vector<std::filesystem::path> out;
    for (const auto& entry : std::filesystem::directory_iterator(fixtures_dir)) {
        const std::string name = entry.path().filename().string();
        if (entry.path().extension() == ".yaml" && name.rfind("valid_", 0) != 0) {
            out.push_back(entry.path());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("parse_duration accepts an integer with one unit") {
    CHECK(cfg::parse_duration("250ms") == 250ms);
    CHECK(cfg::parse_duration("1s") == 1s);
    CHECK(cfg::parse_duration("5m") == 5min);
    CHECK(cfg::parse_duration("1h") == 1h);
    CHECK(cfg::parse_duration("0s") == 0ms);
    CHECK(cfg::parse_duration("0ms") == 0ms);
    CHECK(cfg::parse_duration("007s") == 7s);
    CHECK(cfg::parse_duration("1500ms") == 1500ms);
}

TEST_CASE("parse_duration rejects anything else") {
    for (const char* s : {"", "10", "s", "ms", "1.5s", "-1s", "+1s", " 1s", "1s ", "1 s", "1S",
                          "1sec", "1d", "1us", "1m30s", "1e3ms", "0x10s"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_duration(s).has_value());
    }
}

TEST_CASE("parse_duration bounds: must convert to nanoseconds without overflow") {
    CHECK(cfg::parse_duration("9223372036854ms") == 9223372036854ms);
    CHECK_FALSE(cfg::parse_duration("9223372036855ms").has_value());
    CHECK(cfg::parse_duration("2562047h") == 2562047h);
    CHECK_FALSE(cfg::parse_duration("2562048h").has_value());
    CHECK_FALSE(cfg::parse_duration("99999999999999999999s").has_value());
}

TEST_CASE("parse_size accepts bytes and binary units") {
    CHECK(cfg::parse_size("0") == 0u);
    CHECK(cfg::parse_size("16384") == 16384u);
    CHECK(cfg::parse_size("64KiB") == 65536u);
    CHECK(cfg::parse_size("10MiB") == 10485760u);
    CHECK(cfg::parse_size("1GiB") == 1073741824u);
    CHECK(cfg::parse_size("18446744073709551615") == UINT64_MAX);
    CHECK(cfg::parse_size("17179869183GiB") == ((std::uint64_t{1} << 34) - 1) << 30);
}

TEST_CASE("parse_size rejects overflow, ambiguous units and malformed text") {
    for (const char* s : {"18446744073709551616", "17179869184GiB", "99999999999999999999KiB",
                          "", "KiB", "1.5MiB", "-1", "+1", "10KB", "10MB", "10GB", "10 KiB",
                          "10kib", "10B", "10TiB", "0x10", " 10"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_size(s).has_value());
    }
}

TEST_CASE("parse_address accepts IPv4 and bracketed IPv6 literals") {
    auto a = cfg::parse_address("0.0.0.0:8080");
    REQUIRE(a);
    CHECK(a->host == "0.0.0.0");
    CHECK(a->port == 8080);

    auto b = cfg::parse_address("[::1]:9090");
    REQUIRE(b);
    CHECK(b->host == "::1");
    CHECK(b->port == 9090);

    auto c = cfg::parse_address("127.0.0.1:0");
    REQUIRE(c);
    CHECK(c->port == 0);

    auto d = cfg::parse_address("[2001:db8::10]:65535");
    REQUIRE(d);
    CHECK(d->host == "2001:db8::10");
    CHECK(d->port == 65535);
}

TEST_CASE("parse_address rejects names, bad ports and unbracketed IPv6") {
    for (const char* s : {"1.2.3.4:65536", "1.2.3.4:99999999999999999999", "::1:80", "::1",
                          "localhost:80", "1.2.3.4", "1.2.3.4:", ":80", "[::1]", "[::1]:",
                          "[1.2.3.4]:80", "1.2.3:80", "256.0.0.1:80", "01.2.3.4:80",
                          "1.2.3.4:+80", "1.2.3.4:-1", "1.2.3.4:80 ", "[::1]:80x", "", "[::1:80",
                          "[]:80", "[::1]80"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_address(s).has_value());
    }
}

TEST_CASE("address::to_string brackets IPv6") {
    CHECK(cfg::address{"127.0.0.1", 8080}.to_string() == "127.0.0.1:8080");
    CHECK(cfg::address{"::1", 8080}.to_string() == "[::1]:8080");
    CHECK(cfg::address{"0.0.0.0", 0}.to_string() == "0.0.0.0:0");
    CHECK(cfg::parse_address("[fe80::1]:443")->to_string() == "[fe80::1]:443");
}

TEST_CASE("parse_upstream_url splits host, port, base path and authority") {
    auto a = cfg::parse_upstream_url("http://127.0.0.1:3000");
    REQUIRE(a);
    CHECK(a->host == "127.0.0.1");
    CHECK(a->port == 3000);
    CHECK(a->base_path == "");
    CHECK(a->authority == "127.0.0.1:3000");

    auto b = cfg::parse_upstream_url("http://backend.internal");
    REQUIRE(b);
    CHECK(b->host == "backend.internal");
    CHECK(b->port == 80);
    CHECK(b->authority == "backend.internal");

    auto c = cfg::parse_upstream_url("http://[::1]:8080/api/");
    REQUIRE(c);
    CHECK(c->host == "::1");
    CHECK(c->port == 8080);
    CHECK(c->base_path == "/api");
    CHECK(c->authority == "[::1]:8080");

    auto d = cfg::parse_upstream_url("http://h/");
    REQUIRE(d);
    CHECK(d->base_path == "");

    auto e = cfg::parse_upstream_url("http://h:80/a/b%20c");
    REQUIRE(e);
    CHECK(e->base_path == "/a/b%20c");
    CHECK(e->authority == "h:80");

    auto f = cfg::parse_upstream_url("HTTP://my_host:65535");
    REQUIRE(f);
    CHECK(f->host == "my_host");
    CHECK(f->port == 65535);
}

TEST_CASE("parse_upstream_url rejects other schemes and extra parts") {
    for (const char* s : {"https://h", "ftp://h", "http://", "http:///x", "http:h", "http://u@h",
                          "http://u:p@h", "http://h?x=1", "http://h/?", "http://h#f",
                          "http://h:0", "http://h:65536", "http://h:", "127.0.0.1:3000",
                          "localhost:3000", "", "http://h h", "http://h%41", "http://[v1.x]/",
                          "http://h!/", "http://[::1/"}) {
        CAPTURE(s);
        CHECK_FALSE(cfg::parse_upstream_url(s).has_value());
    }
}

TEST_CASE("valid_full.yaml sets every field") {
    const std::string path = fixtures_dir + "/valid_full.yaml";
    std::shared_ptr<const cfg::config> c = cfg::load_file(path);
    REQUIRE(c);
    CHECK(c->source == path);

    CHECK(c->server.listen.host == "127.0.0.1");
    CHECK(c->server.listen.port == 18080);
    CHECK(c->server.threads == 4);
    CHECK(c->server.max_connections == 2500);
    CHECK(c->server.header_timeout == 250ms);
    CHECK(c->server.idle_timeout == 5min);
    CHECK(c->server.drain_timeout == 0ms);
    CHECK(c->server.max_header_bytes == 32768);
    CHECK(c->server.max_body_bytes == 1073741824);

    CHECK(c->admin.listen.host == "::1");
    CHECK(c->admin.listen.port == 19090);

    CHECK(c->upstream.url.host == "backend.internal");
    CHECK(c->upstream.url.port == 3000);
    CHECK(c->upstream.url.base_path == "/api/v1");
    CHECK(c->upstream.url.authority == "backend.internal:3000");
    CHECK(c->upstream.connect_timeout == 2s);
    CHECK(c->upstream.timeout == 1h);
    CHECK(c->upstream.max_idle_per_worker == 0);

    CHECK(c->log.level == "debug");
}

TEST_CASE("a minimal config keeps every default") {
    auto c = cfg::load_string("upstream: { url: 'http://127.0.0.1:3000' }\n", "mini.yaml");
    const cfg::config defaults;
    CHECK(c->source == "mini.yaml");
    CHECK(c->server.listen.to_string() == defaults.server.listen.to_string());
    CHECK(c->server.threads == defaults.server.threads);
    CHECK(c->server.max_connections == defaults.server.max_connections);
    CHECK(c->server.header_timeout == defaults.server.header_timeout);
    CHECK(c->server.idle_timeout == defaults.server.idle_timeout);
    CHECK(c->server.drain_timeout == defaults.server.drain_timeout);
    CHECK(c->server.max_header_bytes == defaults.server.max_header_bytes);
    CHECK(c->server.max_body_bytes == defaults.server.max_body_bytes);
    CHECK(c->admin.listen.to_string() == defaults.admin.listen.to_string());
    CHECK(c->upstream.connect_timeout == defaults.upstream.connect_timeout);
    CHECK(c->upstream.timeout == defaults.upstream.timeout);
    CHECK(c->upstream.max_idle_per_worker == defaults.upstream.max_idle_per_worker);
    CHECK(c->log.level == defaults.log.level);
}

TEST_CASE("empty optional sections and edge values load") {
    auto c = cfg::load_string(
        "server:\n"
        "  threads: 0\n"
        "  max_body_bytes: 0\n"
        "  max_header_bytes: 1MiB\n"
        "  max_connections: 10000000\n"
        "admin:\n"
        "upstream:\n"
        "  url: \"http://10.0.0.1\"\n"
        "  max_idle_per_worker: \"100000\"\n",
        "edge.yaml");
    CHECK(c->server.threads == 0);
    CHECK(c->server.max_body_bytes == 0);
    CHECK(c->server.max_header_bytes == 1048576);
    CHECK(c->server.max_connections == 10000000);
    CHECK(c->upstream.max_idle_per_worker == 100000);
}

TEST_CASE("load_string errors name the given source") {
    CHECK(string_error("upstream: {url: 'http://h'}\nlog: {level: loud}\n") ==
          "inline.yaml:2:14: log.level: must be one of trace, debug, info, warn, error, off");
    CHECK(string_error("upstream: {url: 'http://h', max_idle_per_worker: 100001}\n") ==
          "inline.yaml:1:50: upstream.max_idle_per_worker: must be between 0 and 100000");
    CHECK(string_error("upstream: {url: 'http://h'}\nserver: {threads: 99999999999999999999}\n") ==
          "inline.yaml:2:19: server.threads: must be between 0 and 1024");
    CHECK(string_error("? [a, b]\n: 1\n") == "inline.yaml:1:3: (root): expected a plain key");
    CHECK(string_error("~\n") == "inline.yaml:1:1: (root): expected a mapping");
}

TEST_CASE("every error fixture fails with the message on its first line") {
    const auto fixtures = error_fixtures();
    CHECK(fixtures.size() >= 20);
    for (const auto& fixture : fixtures) {
        CAPTURE(fixture.filename().string());
        CHECK(file_error(fixture.string()) == expectation_of(fixture));
    }
}

TEST_CASE("an unreadable file is reported without a position") {
    const std::string missing = fixtures_dir + "/no_such_file.yaml";
    CHECK(file_error(missing) == missing + ": cannot read: No such file or directory");
    CHECK(file_error(fixtures_dir) == fixtures_dir + ": cannot read: Is a directory");
}
