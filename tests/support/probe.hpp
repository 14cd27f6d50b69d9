// Looking at a child process from outside (memory, by /proc), and pacing a deliberately slow
// client. For the end-to-end tests.
#pragma once

#include "harness.hpp"

#include <sys/types.h>

#include <chrono>
#include <string_view>

namespace sluice::test {

// A "Vm…:" field of /proc/PID/status in KiB ("VmRSS", "VmHWM"), -1 if it cannot be read.
long proc_status_kib(pid_t pid, std::string_view field);

// True when the process has AddressSanitizer's runtime mapped (a build with SLUICE_SANITIZE):
// its memory then counts shadow and quarantine, so bounds on it need more room.
bool runs_with_asan(pid_t pid);

// The pace of a client that is slow on purpose (a byte every 100 ms): part of the traffic a
// test sends, never a way to wait for the system under test (use eventually() for that).
void client_pace(std::chrono::milliseconds gap);

// For tests that measure a gateway's memory: under ASan, freed blocks wait in a quarantine of up
// to 256 MiB that counts in the resident set. This keeps the caller's ASAN_OPTIONS and caps the
// quarantine at 16 MiB; a gateway built without ASan ignores it.
env_list bounded_quarantine_env();

}  // namespace sluice::test
