#include "probe.hpp"

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace sluice::test {

long proc_status_kib(pid_t pid, std::string_view field) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    const std::string prefix = std::string(field) + ":";
    for (std::string line; std::getline(f, line);)
        if (line.rfind(prefix, 0) == 0) return std::stol(line.substr(prefix.size()));
    return -1;
}

bool runs_with_asan(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
    for (std::string line; std::getline(f, line);)
        if (line.find("/libasan.so") != std::string::npos) return true;
    return false;
}

void client_pace(std::chrono::milliseconds gap) { std::this_thread::sleep_for(gap); }

env_list bounded_quarantine_env() {
    const char* current = std::getenv("ASAN_OPTIONS");
    std::string options = current ? current : "";
    if (!options.empty()) options += ":";
    options += "quarantine_size_mb=16";
    return {{"ASAN_OPTIONS", options}};
}

}  // namespace sluice::test
