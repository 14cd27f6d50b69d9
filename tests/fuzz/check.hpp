// The fuzz targets' one way to report a broken invariant: a message and a crash.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace sluice::fuzz {

inline void check(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
}

}  // namespace sluice::fuzz
