#include "config/stable_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "config/config.hpp"

namespace sluice::config {

namespace {

using steady = std::chrono::steady_clock;

struct file_stat {
    mode_t mode = 0;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    timespec mtime{};
    timespec ctime{};

    bool operator==(const file_stat& o) const {
        auto same = [](const timespec& a, const timespec& b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; };
        return dev == o.dev && ino == o.ino && size == o.size && same(mtime, o.mtime) && same(ctime, o.ctime);
    }
};

// One read: the stat before and after it, and the bytes.
struct snapshot {
    file_stat before, after;
    std::string text;

    bool torn() const { return !(before == after); }
    bool operator==(const snapshot& o) const { return !torn() && !o.torn() && before == o.before && text == o.text; }
};

[[noreturn]] void fail(const std::string& path, int err) {
    throw config_error(path + ": cannot read: " + std::strerror(err));
}

file_stat stat_of(int fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail(path, errno);
    return {st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
}

snapshot read_once(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, errno);
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } close_at_end{fd};
    snapshot s;
    s.before = stat_of(fd, path);
    char buf[8192];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            fail(path, errno);
        }
        s.text.append(buf, static_cast<std::size_t>(n));
    }
    s.after = stat_of(fd, path);
    return s;
}

// How long ago the file was last written, by its mtime (negative if in the future). An
// mtime of whole seconds may come from a file system that keeps no finer time: the write
// may have been up to a second later.
std::chrono::nanoseconds age(const file_stat& st) {
    const auto mtime = std::chrono::seconds(st.mtime.tv_sec) + std::chrono::nanoseconds(st.mtime.tv_nsec) +
                       std::chrono::seconds(st.mtime.tv_nsec == 0 ? 1 : 0);
    return std::chrono::system_clock::now().time_since_epoch() - mtime;
}

}  // namespace

std::string read_stable_file(const std::string& path, const stable_read_options& options) {
    const auto deadline = steady::now() + options.limit;
    std::optional<snapshot> last;
    steady::time_point since;  // when `last` was first seen
    for (;;) {
        snapshot now_read = read_once(path);
        if (options.after_read) options.after_read();
        // A pipe (--config <(...)) can be read only once, and nothing rewrites it.
        if (!S_ISREG(now_read.before.mode)) return std::move(now_read.text);
        const auto now = steady::now();
        if (last && now_read == *last) {
            if (age(last->after) >= options.settle || now - since >= options.settle) return std::move(now_read.text);
        } else {
            const bool first = !last;
            last = std::move(now_read);
            since = now;
            // A file that has not been seen yet is read again at once: if it holds still and
            // is old enough, that is all the wait there is.
            if (first) continue;
        }
        if (now >= deadline)
            throw config_error(path + ": changed while being read (still changing after " +
                               std::to_string(options.limit.count()) +
                               " ms); replace it by rename: write a temporary file, then mv it over this one");
        const auto by_mtime = now + (options.settle - age(last->after));
        std::this_thread::sleep_until(std::min({by_mtime, since + options.settle, deadline}));
    }
}

}  // namespace sluice::config
