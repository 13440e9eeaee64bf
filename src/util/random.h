// Deterministic, platform-independent randomness from a key: splitmix64 (Steele et al. 2014).
// Data order, masking and corpus construction use it instead of libstdc++ distributions, so
// the same seed gives the same batches and the same corpora everywhere.
#pragma once
#include <cstdint>

namespace ropelab::util {

constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace ropelab::util
