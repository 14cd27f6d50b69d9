// Child process control for end-to-end tests.
//
// A `process` runs one program with stdout and stderr joined into one pipe. A background
// thread drains the pipe continuously (the child never blocks on a full pipe), records all
// output, and reaps the child when it exits. Waiting is done on a condition variable.
//
// The child gets PR_SET_PDEATHSIG(SIGKILL), so it dies if the test binary dies (only while the
// thread that constructed the `process` is alive: construct from the test thread).
// Set SLUICE_TEST_VERBOSE=1 in the environment to copy children's output to stderr as well.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace sluice::test {

using namespace std::chrono_literals;

class process {
public:
    // argv[0] is looked up in PATH if it contains no '/'. `extra_env` is added to (and overrides
    // entries of) the current environment. Throws std::runtime_error if the program cannot run.
    explicit process(std::vector<std::string> argv, std::vector<std::pair<std::string, std::string>> extra_env = {});
    // If still running: SIGTERM, up to 5 s grace, then SIGKILL. Always reaps and joins.
    ~process();

    process(const process&) = delete;
    process& operator=(const process&) = delete;

    pid_t pid() const { return pid_; }

    // Returns the regex groups (0 = whole match) of the first complete output line, searching
    // all output since start (also lines already returned before), that matches
    // `ecmascript_regex` (std::regex_search). Throws std::runtime_error with the output so far
    // on timeout or if the child's output ends (it exited) without such a line.
    std::vector<std::string> wait_for_line(const std::string& ecmascript_regex,
                                           std::chrono::milliseconds timeout = 15s);

    // Everything the child wrote to stdout and stderr so far.
    std::string output() const;

    // Sends `sig` to the child; does nothing once the child has been reaped.
    void signal(int sig);

    // Exit status, or 128 + signal number if killed by a signal; nullopt on timeout.
    std::optional<int> wait_exit(std::chrono::milliseconds timeout);

    bool running();

private:
    void reader_main();
    void reap_locked(bool block);  // requires mu_ held

    std::vector<std::string> argv_;
    pid_t pid_ = -1;
    int out_fd_ = -1;   // read end of the output pipe
    int pid_fd_ = -1;   // pidfd of the child, -1 if unsupported
    int wake_fd_ = -1;  // eventfd to stop the reader thread

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::string output_;
    bool output_closed_ = false;      // pipe reached EOF
    std::optional<int> exit_status_;  // set once reaped

    std::thread reader_;
};

}  // namespace sluice::test
