// Shared bits of the libFuzzer targets: a scratch directory for readers that take a path, and
// a failure that libFuzzer reports as a crash (with the input saved).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace fuzz {

inline std::string scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/ropelab-fuzz.XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    if (d == nullptr) std::abort();
    return std::string(d);
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, const std::string& bytes) {
  std::string path = scratch_dir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// A property of the parser does not hold: print why and abort (libFuzzer keeps the input).
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "property violated: %s\n", what.c_str());
  std::abort();
}

inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace fuzz
