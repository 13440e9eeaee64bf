#include "util/platform.h"

#include <dlfcn.h>
#include <link.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include <ATen/Parallel.h>

#include "util/gemm.h"
#include "util/signals.h"

namespace ropelab::platform {

namespace {
template <class F>
F blas_sym(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));  // NOLINT
}
}  // namespace

std::string blas_core() {
  using Fn = char* (*)();
  auto fn = blas_sym<Fn>("openblas_get_corename");
  if (fn == nullptr) return "unknown";
  const char* name = fn();
  return name != nullptr ? std::string(name) : "unknown";
}

bool blas_core_is_generic(const std::string& core) {
  std::string c = core;
  std::transform(c.begin(), c.end(), c.begin(), [](unsigned char ch) { return std::tolower(ch); });
  static const char* kGeneric[] = {"prescott",  "core2",  "penryn",  "dunnington",
                                   "nehalem",   "atom",   "katmai",  "coppermine",
                                   "northwood", "banias", "generic", "sse_generic"};
  return std::any_of(std::begin(kGeneric), std::end(kGeneric),
                     [&](const char* g) { return c == g; });
}

bool blas_core_has_avx512(const std::string& core) {
  std::string c = core;
  std::transform(c.begin(), c.end(), c.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return c == "skylakex" || c == "cooperlake" || c == "sapphirerapids";
}

std::string preferred_blas_core() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "Haswell";
  return "";
}

std::string blas_core_to_request() {
  if (std::getenv("ROPELAB_KEEP_BLAS_CORE") != nullptr) return "";  // explicit opt-out
  std::string core = blas_core();
  if (core == "unknown") return "";
  std::string want = preferred_blas_core();
  if (want.empty()) return "";
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (set != nullptr && want == set) return "";  // already asked for it: never loop
  // A generic core is always replaced. So is an AVX2 core on a CPU with AVX-512, whether
  // OpenBLAS picked it (0.3.21 runs AMD Zen 4 on its Haswell/Zen kernels) or the environment
  // pinned it: 2048^2 fp32 matmul runs at ~138 GFLOP/s there against ~209 with SkylakeX.
  // ROPELAB_KEEP_BLAS_CORE=1 keeps any choice.
  bool upgrade = want == "SkylakeX" && !blas_core_has_avx512(core);
  if (!blas_core_is_generic(core) && !upgrade) return "";
  return want;
}

bool openmp_wait_policy_to_set() {
  // libgomp's default lets the workers of ATen's pool spin for a while after every parallel
  // region, on the very cores that OpenBLAS's own threads need next: on 2 cores a second thread
  // then gains nothing in fp32 (docs/platform-notes.md). PASSIVE makes them sleep at once. Where
  // float32 matmuls run on oneDNN's sgemm instead (util/gemm.h), every pool doing the work is
  // OpenMP's and the spinning is what keeps it fast: libgomp's default stays (LM bench, fp32
  // +7-14%, bf16 +4% against PASSIVE). A value the user set (OMP_WAIT_POLICY or GOMP_SPINCOUNT)
  // is kept, and so is ROPELAB_KEEP_OMP_WAIT.
  return std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr &&
         std::getenv("ROPELAB_KEEP_OMP_WAIT") == nullptr && !util::fast_sgemm_available();
}

// glibc.malloc.hugetlb=1: malloc asks for transparent huge pages (madvise) on its heap, so a
// large tensor that the kernel paged out between steps comes back in 2 MiB faults, not 4 KiB
// ones (docs/platform-notes.md). ROPELAB_KEEP_MALLOC=1 keeps glibc's defaults.
constexpr const char* kHugePages = "glibc.malloc.hugetlb=1";

bool huge_pages_to_set() {
  if (std::getenv("ROPELAB_KEEP_MALLOC") != nullptr) return false;
  const char* t = std::getenv("GLIBC_TUNABLES");
  return t == nullptr || std::strstr(t, "glibc.malloc.hugetlb") == nullptr;
}

std::string stdfs_provider() {
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&, std::error_code&);
  const RemoveAll fn = &std::filesystem::remove_all;  // the definition this process bound to
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(fn), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string by = info.dli_fname;
  return by.find(".so") == std::string::npos ? "" : by;  // "": the program's own copy
}

namespace {
constexpr const char* kPreloaded = "ROPELAB_STDCXX_PRELOADED";  // set: LD_PRELOAD was unset
constexpr const char* kPreloadedFrom = "ROPELAB_LD_PRELOAD_BEFORE";

// The path of libstdc++ when std::filesystem is bound to another library's copy (a PyTorch
// wheel's libtorch exports some whose remove_all calls a null pointer, and the link order that
// should keep them out did not, on one CUDA image): preloading libstdc++ puts it first. "" when
// nothing is to be done, or when ROPELAB_KEEP_STDCXX is set.
std::string stdcxx_to_preload() {
  if (std::getenv("ROPELAB_KEEP_STDCXX") != nullptr) return "";  // explicit opt-out
  std::string by = stdfs_provider();
  if (by.empty() || by.find("libstdc++") != std::string::npos) return "";
  void* h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen("libstdc++.so.6", RTLD_NOW);
  link_map* lm = nullptr;
  if (h == nullptr || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || lm == nullptr) return "";
  return lm->l_name;
}

// In the process re-executed with libstdc++ preloaded: LD_PRELOAD goes back to what it was, so
// that the processes this one starts (Python, tools) get the user's environment. Returns whether
// this process is that one.
bool restore_preload() {
  if (std::getenv(kPreloaded) == nullptr) return false;
  if (const char* before = std::getenv(kPreloadedFrom))
    setenv("LD_PRELOAD", before, 1);
  else
    unsetenv("LD_PRELOAD");
  unsetenv(kPreloaded);
  unsetenv(kPreloadedFrom);
  std::string by = stdfs_provider();
  if (!by.empty() && by.find("libstdc++") == std::string::npos)
    spdlog::warn(
        "std::filesystem comes from {} even with libstdc++ preloaded: removing a "
        "directory may crash (docs/platform-notes.md, 'std::filesystem')",
        by);
  return true;
}

void preload_stdcxx(const std::string& lib) {
  const char* before = std::getenv("LD_PRELOAD");
  setenv(kPreloaded, "1", 1);
  if (before != nullptr) setenv(kPreloadedFrom, before, 1);
  std::string v = before != nullptr && *before != '\0' ? lib + ":" + before : lib;
  setenv("LD_PRELOAD", v.c_str(), 1);
}
}  // namespace

void ensure_fast_blas(int argc, char** argv) {
  (void)argc;
  // These settings are read once, when the libraries load: one re-execution applies them.
  std::string stdcxx = restore_preload() ? "" : stdcxx_to_preload();
  std::string core = blas_core_to_request();
  bool wait = openmp_wait_policy_to_set();
  bool huge = huge_pages_to_set();
  if (core.empty() && !wait && !huge && stdcxx.empty()) return;
  if (!stdcxx.empty()) preload_stdcxx(stdcxx);
  if (huge) {
    const char* t = std::getenv("GLIBC_TUNABLES");
    std::string v = t != nullptr && *t != '\0' ? std::string(t) + ":" + kHugePages : kHugePages;
    setenv("GLIBC_TUNABLES", v.c_str(), 1);
  }
  if (!core.empty()) {
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    setenv("ROPELAB_BLAS_FIXED_FROM", blas_core().c_str(), 1);  // for blas_summary()
  }
  if (wait) setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the slow settings rather than die.
  spdlog::warn(
      "could not re-execute with OPENBLAS_CORETYPE={} OMP_WAIT_POLICY=PASSIVE: math "
      "will be slower",
      core.empty() ? "(unchanged)" : core);
}

namespace {
bool g_freed_memory_kept = false;
constexpr int kNoTrim = INT_MAX;  // bytes: in effect, never trim the heap
}  // namespace

void keep_freed_memory() {
  if (std::getenv("ROPELAB_KEEP_MALLOC") != nullptr) return;
  g_freed_memory_kept = mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, kNoTrim) == 1;
}

bool freed_memory_kept() { return g_freed_memory_kept; }

bool cpu_has_amx_bf16() {
  static const bool has = [] {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("flags", 0) == 0) return line.find(" amx_bf16") != std::string::npos;
    return false;
  }();
  return has;
}

bool malloc_huge_pages() {
  const char* t = std::getenv("GLIBC_TUNABLES");
  return t != nullptr && std::strstr(t, kHugePages) != nullptr;
}

std::string malloc_tunables() {
  return "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=" + std::to_string(kNoTrim) + ":" +
         kHugePages;
}

std::string blas_summary() {
  std::string core = blas_core();
  std::string s = "BLAS: OpenBLAS " + core + " kernels";
  if (core == "unknown") return "BLAS: not OpenBLAS (core unknown)";
  if (const char* from = std::getenv("ROPELAB_BLAS_FIXED_FROM"))
    s += std::string(" (OpenBLAS had picked ") + from + "; ropelab set OPENBLAS_CORETYPE)";
  if (blas_core_is_generic(core)) s += " -- generic and slow: fp32 math runs several times slower";
  return s;
}

void set_threads(int n) {
  if (n > 0) {
    // ATen's intra-op pool (OpenMP), OpenBLAS's own pthreads, and oneDNN (which runs on ATen's
    // OpenMP pool, so at::set_num_threads governs it too).
    at::set_num_threads(n);
    using Fn = void (*)(int);
    if (auto fn = blas_sym<Fn>("openblas_set_num_threads")) fn(n);
  }
  // Each thread of the pool, as it now is, takes one task (see kernel_threads) and gets an
  // alternate signal stack: a signal that lands on a thread inside one of oneDNN's GEMM kernels
  // must not be handled on that kernel's stack (util/signals.h).
  at::parallel_for(0, at::get_num_threads(), 1,
                   [](int64_t, int64_t) { signals::use_signal_stack(); });
}

int blas_threads() {
  using Fn = int (*)();
  auto fn = blas_sym<Fn>("openblas_get_num_threads");
  return fn != nullptr ? fn() : -1;
}

int kernel_threads() {
  const int64_t n = at::get_num_threads();
  std::vector<int> seen(static_cast<size_t>(n), 0);
  // One task per thread, each long enough that no thread takes two.
  at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)] = at::get_thread_num() + 1;
  });
  std::sort(seen.begin(), seen.end());
  return static_cast<int>(std::unique(seen.begin(), seen.end()) - seen.begin());
}

std::string openmp_wait_policy() {
  if (const char* p = std::getenv("OMP_WAIT_POLICY")) return p;
  if (const char* s = std::getenv("GOMP_SPINCOUNT")) return std::string("GOMP_SPINCOUNT=") + s;
  return "default (active spinning)";
}

std::string executable_path() {
  std::vector<char> buf(PATH_MAX + 1, '\0');
  ssize_t n = readlink("/proc/self/exe", buf.data(), PATH_MAX);
  return n <= 0 ? "ropelab" : std::string(buf.data(), static_cast<size_t>(n));  // else: PATH's
}

std::string executable_dir() {
  const std::string p = executable_path();
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string script_path(const std::string& name) {
  if (const char* p = std::getenv("ROPELAB_SCRIPTS_DIR")) return std::string(p) + "/" + name;
  std::string near = executable_dir() + "/../../scripts/" + name;
  std::error_code ec;
  if (std::filesystem::exists(near, ec)) return near;
  return std::string(ROPELAB_SCRIPTS_DIR) + "/" + name;
}

}  // namespace ropelab::platform
