// A stand-in for a PyTorch wheel's libtorch, which exports its own copies of libstdc++'s
// std::filesystem functions (docs/platform-notes.md, 'std::filesystem'): this library exports
// std::filesystem::remove_all, and calling it ends the process with a line naming it.
// Preloaded into a ropelab binary (tests/unit/platform_test.cpp), it shows whether start-up
// puts libstdc++'s definition first.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace std::filesystem {  // NOLINT(cert-dcl58-cpp): interposing this definition is the point
std::uintmax_t remove_all(const path& /*p*/, std::error_code& /*ec*/) {
  std::fputs("fake_stdfs: remove_all called\n", stderr);
  std::_Exit(86);
}
}  // namespace std::filesystem
