#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <stdexcept>

extern char** environ;

namespace sluice::test {

namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void close_fd(int& fd) {
    if (fd >= 0) {
        ::close(fd);
        fd = -1;
    }
}

// PATH lookup done in the parent, so the forked child only has to call execve.
std::string resolve_program(const std::string& name) {
    if (name.find('/') != std::string::npos) return name;
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= dirs.size()) {
        std::size_t end = dirs.find(':', start);
        if (end == std::string::npos) end = dirs.size();
        std::string dir = dirs.substr(start, end - start);
        if (dir.empty()) dir = ".";
        std::string candidate = dir + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        start = end + 1;
    }
    return name;
}

int decode_status(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

bool verbose() {
    static const bool v = [] {
        const char* e = std::getenv("SLUICE_TEST_VERBOSE");
        return e && *e && std::string_view(e) != "0";
    }();
    return v;
}

}  // namespace

process::process(std::vector<std::string> argv, std::vector<std::pair<std::string, std::string>> extra_env)
    : argv_(std::move(argv)) {
    if (argv_.empty()) throw std::runtime_error("process: empty argv");

    // Everything the child needs is prepared before fork(): after fork() in a threaded program
    // only async-signal-safe calls are allowed.
    const std::string program = resolve_program(argv_[0]);
    std::vector<char*> cargv;
    for (auto& a : argv_) cargv.push_back(a.data());
    cargv.push_back(nullptr);

    std::vector<std::string> env_strings;
    for (char** e = environ; e && *e; ++e) {
        std::string_view entry(*e);
        auto eq = entry.find('=');
        std::string_view name = entry.substr(0, eq);
        bool overridden = false;
        for (const auto& [k, v] : extra_env)
            if (k == name) overridden = true;
        if (!overridden) env_strings.emplace_back(entry);
    }
    for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);
    std::vector<char*> cenv;
    for (auto& s : env_strings) cenv.push_back(s.data());
    cenv.push_back(nullptr);

    int out_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error(errno_text("pipe2"));
    int err_pipe[2];
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
        ::close(out_pipe[0]);
        ::close(out_pipe[1]);
        throw std::runtime_error(errno_text("pipe2"));
    }
    int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const pid_t parent = ::getpid();

    pid_t child = ::fork();
    if (child < 0) {
        int saved = errno;
        ::close(out_pipe[0]);
        ::close(out_pipe[1]);
        ::close(err_pipe[0]);
        ::close(err_pipe[1]);
        if (dev_null >= 0) ::close(dev_null);
        errno = saved;
        throw std::runtime_error(errno_text("fork"));
    }
    if (child == 0) {
        // Child: async-signal-safe calls only.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::signal(SIGPIPE, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        ::signal(SIGINT, SIG_DFL);
        if (dev_null >= 0) ::dup2(dev_null, 0);
        ::dup2(out_pipe[1], 1);
        ::dup2(out_pipe[1], 2);
        ::execve(program.c_str(), cargv.data(), cenv.data());
        int err = errno;
        ssize_t ignored = ::write(err_pipe[1], &err, sizeof err);
        (void)ignored;
        ::_exit(127);
    }

    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (dev_null >= 0) ::close(dev_null);

    // The error pipe closes on a successful exec (O_CLOEXEC) or carries exec's errno.
    int exec_errno = 0;
    ssize_t n;
    do {
        n = ::read(err_pipe[0], &exec_errno, sizeof exec_errno);
    } while (n < 0 && errno == EINTR);
    ::close(err_pipe[0]);
    if (n == static_cast<ssize_t>(sizeof exec_errno)) {
        ::close(out_pipe[0]);
        int st = 0;
        ::waitpid(child, &st, 0);
        throw std::runtime_error("process: cannot execute " + program + ": " + std::strerror(exec_errno));
    }

    pid_ = child;
    out_fd_ = out_pipe[0];
#ifdef SYS_pidfd_open
    pid_fd_ = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
    if (pid_fd_ >= 0) ::fcntl(pid_fd_, F_SETFD, FD_CLOEXEC);
#endif
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ < 0) {
        int saved = errno;
        ::kill(pid_, SIGKILL);
        int st = 0;
        ::waitpid(pid_, &st, 0);
        close_fd(out_fd_);
        close_fd(pid_fd_);
        errno = saved;
        throw std::runtime_error(errno_text("eventfd"));
    }
    reader_ = std::thread([this] { reader_main(); });
}

process::~process() {
    if (running()) {
        signal(SIGTERM);
        if (!wait_exit(5s)) {
            signal(SIGKILL);
            wait_exit(10s);
        }
    }
    if (reader_.joinable()) {
        std::uint64_t one = 1;
        ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
        (void)ignored;
        reader_.join();
    }
    {
        std::lock_guard lk(mu_);
        reap_locked(true);
    }
    close_fd(out_fd_);
    close_fd(pid_fd_);
    close_fd(wake_fd_);
}

void process::reap_locked(bool block) {
    if (exit_status_ || pid_ <= 0) return;
    int st = 0;
    pid_t r;
    do {
        r = ::waitpid(pid_, &st, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == pid_)
        exit_status_ = decode_status(st);
    else if (r < 0)
        exit_status_ = -1;  // not our child any more (ECHILD): nothing left to wait for
}

void process::reader_main() {
    char buf[65536];
    for (;;) {
        bool out_open, exited;
        {
            std::lock_guard lk(mu_);
            out_open = !output_closed_;
            exited = exit_status_.has_value();
        }
        if (!out_open && exited) return;

        pollfd fds[3];
        nfds_t count = 0;
        int out_idx = -1, pid_idx = -1;
        fds[count++] = pollfd{wake_fd_, POLLIN, 0};
        if (out_open) {
            out_idx = static_cast<int>(count);
            fds[count++] = pollfd{out_fd_, POLLIN, 0};
        }
        if (!exited && pid_fd_ >= 0) {
            pid_idx = static_cast<int>(count);
            fds[count++] = pollfd{pid_fd_, POLLIN, 0};
        }
        // Without a pidfd the exit is noticed by checking at a bounded interval.
        const int timeout_ms = (!exited && pid_fd_ < 0) ? 50 : -1;
        int pr = ::poll(fds, count, timeout_ms);
        if (pr < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[0].revents) return;

        if (out_idx >= 0 && fds[out_idx].revents) {
            ssize_t n = ::read(out_fd_, buf, sizeof buf);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n > 0 && verbose()) {
                ssize_t ignored = ::write(2, buf, static_cast<std::size_t>(n));
                (void)ignored;
            }
            std::lock_guard lk(mu_);
            if (n > 0)
                output_.append(buf, static_cast<std::size_t>(n));
            else
                output_closed_ = true;
            cv_.notify_all();
        }
        if ((pid_idx >= 0 && fds[pid_idx].revents) || (!exited && pid_fd_ < 0)) {
            std::lock_guard lk(mu_);
            reap_locked(false);
            if (exit_status_) cv_.notify_all();
        }
    }
}

std::vector<std::string> process::wait_for_line(const std::string& ecmascript_regex,
                                                std::chrono::milliseconds timeout) {
    const std::regex re(ecmascript_regex, std::regex::ECMAScript);
    const auto deadline = std::chrono::steady_clock::now() + timeout;

    auto groups_of = [](const std::smatch& m) {
        std::vector<std::string> out;
        for (const auto& g : m) out.push_back(g.str());
        return out;
    };

    std::unique_lock lk(mu_);
    std::size_t pos = 0;  // start of the first line not yet examined
    for (;;) {
        for (;;) {
            auto nl = output_.find('\n', pos);
            if (nl == std::string::npos) break;
            std::string line = output_.substr(pos, nl - pos);
            pos = nl + 1;
            if (!line.empty() && line.back() == '\r') line.pop_back();
            std::smatch m;
            if (std::regex_search(line, m, re)) return groups_of(m);
        }
        if (output_closed_) {
            if (pos < output_.size()) {
                std::string line = output_.substr(pos);
                pos = output_.size();
                std::smatch m;
                if (std::regex_search(line, m, re)) return groups_of(m);
            }
            std::string status = exit_status_ ? " (exit status " + std::to_string(*exit_status_) + ")" : "";
            throw std::runtime_error("process " + argv_[0] + " ended its output" + status +
                                     " without a line matching /" + ecmascript_regex + "/; output:\n" + output_);
        }
        const bool progressed = cv_.wait_until(
            lk, deadline, [&] { return output_closed_ || output_.find('\n', pos) != std::string::npos; });
        if (!progressed)
            throw std::runtime_error("process " + argv_[0] + ": timeout after " + std::to_string(timeout.count()) +
                                     " ms waiting for a line matching /" + ecmascript_regex + "/; output so far:\n" +
                                     output_);
    }
}

std::string process::output() const {
    std::lock_guard lk(mu_);
    return output_;
}

void process::signal(int sig) {
    std::lock_guard lk(mu_);
    // While the child is not reaped (checked under the lock that reaping takes), its pid
    // cannot have been reused.
    reap_locked(false);
    if (!exit_status_) ::kill(pid_, sig);
}

std::optional<int> process::wait_exit(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    reap_locked(false);
    // Also wait for the pipe's end, so output() then holds everything the child wrote.
    cv_.wait_for(lk, timeout, [&] { return exit_status_.has_value() && output_closed_; });
    return exit_status_;
}

bool process::running() {
    std::lock_guard lk(mu_);
    reap_locked(false);
    return !exit_status_.has_value();
}

}  // namespace sluice::test
