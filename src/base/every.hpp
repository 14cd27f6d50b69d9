// A warning a failure would repeat for every request, written once in a while instead.
#pragma once

#include <chrono>

namespace sluice::base {

// Whether a line is due now: the first, then at most one per `every`. `last` is the line's
// own time (a thread_local at its call site: one per worker).
inline bool due(std::chrono::steady_clock::time_point& last, std::chrono::steady_clock::duration every) {
    const auto now = std::chrono::steady_clock::now();
    if (last != std::chrono::steady_clock::time_point{} && now - last < every) return false;
    last = now;
    return true;
}

}  // namespace sluice::base
