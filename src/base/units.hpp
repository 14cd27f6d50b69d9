// Sizes in bytes, written as 16 * KiB: the product is computed in std::size_t.
#pragma once

#include <cstddef>

namespace sluice::base {

inline constexpr std::size_t KiB = 1024;
inline constexpr std::size_t MiB = 1024 * KiB;

}  // namespace sluice::base
