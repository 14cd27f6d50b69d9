// read_stable_file: a file rewritten in place is read again until it holds still. The
// waits are driven by the file's mtime, set here, so no test sleeps to synchronise.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "config/config.hpp"
#include "config/stable_file.hpp"

namespace cfg = sluice::config;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// A file in a directory of its own, removed at the end.
struct temp_file {
    temp_file() {
        static int calls = 0;
        dir =
            fs::temp_directory_path() / ("sluice-stable-" + std::to_string(::getpid()) + "-" + std::to_string(++calls));
        fs::create_directories(dir);
        path = (dir / "file.yaml").string();
    }
    ~temp_file() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    temp_file(const temp_file&) = delete;
    temp_file& operator=(const temp_file&) = delete;

    // Rewrites the file in place (same inode), last written `age` ago by its mtime.
    void write(const std::string& text, fs::file_time_type::duration age = 0s) const {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
        if (age != age.zero()) fs::last_write_time(path, fs::file_time_type::clock::now() - age);
    }

    fs::path dir;
    std::string path;
};

std::string error_of(const std::string& path, const cfg::stable_read_options& options) {
    try {
        cfg::read_stable_file(path, options);
    } catch (const cfg::config_error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace

TEST_CASE("config: stable read takes a file written long ago at once: two reads, no wait") {
    temp_file f;
    f.write("a: 1\n", 2h);
    int reads = 0;
    // A limit of 0: any wait would fail the read.
    cfg::stable_read_options options{1h, 0ms, [&] { ++reads; }};
    CHECK(cfg::read_stable_file(f.path, options) == "a: 1\n");
    CHECK(reads == 2);
}

TEST_CASE("config: stable read refuses a file written less than the settle period ago") {
    temp_file f;
    f.write("a: 1\n");
    const std::string error = error_of(f.path, {1h, 0ms, {}});
    CHECK(error == f.path +
                       ": changed while being read (still changing after 0 ms); replace it by rename: write a "
                       "temporary file, then mv it over this one");
}

TEST_CASE("config: stable read reads again a file that changed between two reads") {
    temp_file f;
    f.write("keys: [a, b]\n", 2h);
    int reads = 0;
    // An in-place rewrite caught half-way, then finished: the reads that differ are dropped
    // and the whole new version is taken. The mtime is set back each time, so that only the
    // comparison of the reads can see the change.
    cfg::stable_read_options options{1h, 1h, [&] {
                                         ++reads;
                                         if (reads == 1) f.write("keys: [a", 2h);
                                         if (reads == 2) f.write("keys: [a, b, c]\n", 2h);
                                     }};
    CHECK(cfg::read_stable_file(f.path, options) == "keys: [a, b, c]\n");
    CHECK(reads == 4);
}

TEST_CASE("config: stable read fails on a file that keeps changing, and names the fix") {
    temp_file f;
    f.write("v: 0\n", 2h);
    int reads = 0;
    const std::string error = error_of(f.path, {1h, 0ms, [&] { f.write("v: " + std::to_string(++reads) + "\n", 2h); }});
    CHECK(error.starts_with(f.path + ": changed while being read"));
    CHECK(error.ends_with("replace it by rename: write a temporary file, then mv it over this one"));
    CHECK(reads == 2);
}

TEST_CASE("config: stable read takes a file with an mtime in the future once seen unchanged for the settle period") {
    temp_file f;
    f.write("a: 1\n", -1h);
    int reads = 0;
    CHECK(cfg::read_stable_file(f.path, {20ms, 10s, [&] { ++reads; }}) == "a: 1\n");
    CHECK(reads == 3);
}

TEST_CASE("config: stable read takes an mtime of whole seconds for up to a second later") {
    temp_file f;
    f.write("a: 1\n");
    // An mtime of whole seconds, and a settle period it is just old enough for; but on a file
    // system that keeps whole seconds only, the write may have been up to a second later.
    const auto now = std::chrono::system_clock::now();
    const auto whole = std::chrono::floor<std::chrono::seconds>(now) - 1s;
    const timespec times[2] = {{0, UTIME_OMIT}, {whole.time_since_epoch().count(), 0}};
    REQUIRE(::utimensat(AT_FDCWD, f.path.c_str(), times, 0) == 0);
    const auto settle = std::chrono::floor<std::chrono::milliseconds>(now - whole);
    CHECK(error_of(f.path, {settle, 0ms, {}}).starts_with(f.path + ": changed while being read"));
}

TEST_CASE("config: stable read reports a file it cannot read at once") {
    temp_file f;
    CHECK(error_of(f.path, {}) == f.path + ": cannot read: No such file or directory");
    CHECK(error_of(f.dir.string(), {}) == f.dir.string() + ": cannot read: Is a directory");
}
