// Platform fixes that every ropelab process needs before it does any math.
//
// OpenBLAS 0.3.21 (Debian bookworm) does not recognise recent Xeons and falls back to its
// generic "Prescott" kernels: fp32 matmul runs ~6x slower (docs/platform-notes.md). OpenBLAS
// reads OPENBLAS_CORETYPE only when it is loaded, before main(), so the fix is to re-execute
// the process once with the variable set. That happens in ensure_fast_blas().
#pragma once
#include <string>

namespace ropelab::platform {

// Call first thing in main(). Re-executes the program once when either setting below is
// missing (both are read only when the libraries load):
//  - OMP_WAIT_POLICY=PASSIVE when float32 matmuls run on OpenBLAS (no oneDNN sgemm, or
//    ROPELAB_FP32_GEMM=blas), unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT (or
//    ROPELAB_KEEP_OMP_WAIT=1): ATen's OpenMP workers otherwise spin after each parallel region
//    on the cores OpenBLAS's threads need, and a second thread gains nothing in fp32. With
//    oneDNN's sgemm every pool that works is OpenMP's, and libgomp's default spin is faster;
//  - GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (appended), unless ROPELAB_KEEP_MALLOC=1: malloc's
//    heap in transparent huge pages (see keep_freed_memory());
//  - the BLAS core: if OpenBLAS runs a slow generic core (its own choice, or an
// OPENBLAS_CORETYPE naming one) on a CPU that has AVX-512 (or AVX2), or picked an AVX2 core on
// a CPU with AVX-512 (AMD Zen 4; also when OPENBLAS_CORETYPE pinned it), re-executes the program
// with OPENBLAS_CORETYPE set to the fast core; otherwise returns. Set ROPELAB_KEEP_BLAS_CORE=1
// to keep whatever OpenBLAS chose (e.g. to measure the slow path);
//  - LD_PRELOAD=libstdc++ when std::filesystem is bound to another library's copy
//    (stdfs_provider()): a PyTorch wheel's libtorch exports copies whose remove_all calls a null
//    pointer. The re-executed process puts LD_PRELOAD back as it was, for the processes it starts.
//    ROPELAB_KEEP_STDCXX=1 keeps the binding as it is.
void ensure_fast_blas(int argc, char** argv);
// Whether the CPU has AMX's bf16 tiles: the kernel's flag amx_bf16 in /proc/cpuinfo (shown only
// where the kernel enabled the tiles). Read once.
bool cpu_has_amx_bf16();
// The shared library that defines the std::filesystem::remove_all this process calls, or ""
// when the program carries its own.
std::string stdfs_provider();

// Call first thing in main(), after ensure_fast_blas(): glibc's malloc then keeps freed memory
// for reuse instead of returning it to the kernel (M_MMAP_MAX = 0: no block of its own per large
// allocation; M_TRIM_THRESHOLD: no trimming). A training step allocates and frees the same large
// tensors every step (logits, attention scores, FFN activations); each fresh mapping costs a page
// fault per 4 KiB on first touch, which on a virtual machine took more than half of the LM bench
// step (docs/platform-notes.md). Set ROPELAB_KEEP_MALLOC=1 to keep glibc's defaults.
void keep_freed_memory();
// The same settings as a GLIBC_TUNABLES value, for child processes (bench's PyTorch reference
// gets ropelab's allocator settings, as it gets its BLAS core).
std::string malloc_tunables();
// Whether keep_freed_memory() is in force in this process.
bool freed_memory_kept();
// Whether malloc asks for transparent huge pages (glibc.malloc.hugetlb=1, which
// ensure_fast_blas() sets in its re-execution unless ROPELAB_KEEP_MALLOC=1).
bool malloc_huge_pages();

// The kernel family OpenBLAS uses ("SkylakeX", "Prescott", ...), or "unknown" when the BLAS
// in use is not OpenBLAS.
std::string blas_core();
// The core we would ask for on this CPU ("SkylakeX", "Haswell") or "" if none is better.
std::string preferred_blas_core();
// True when blas_core() is one of OpenBLAS's generic fallbacks.
bool blas_core_is_generic(const std::string& core);
// True for OpenBLAS's AVX-512 kernel families (SkylakeX, Cooperlake, SapphireRapids).
bool blas_core_has_avx512(const std::string& core);

// One line for the start-up log: the kernel in use, and whether ropelab had to fix it.
std::string blas_summary();

// Sets every pool that does the math to n threads (0 = leave as is): ATen's intra-op pool
// (OpenMP; oneDNN runs on it) and OpenBLAS's own threads. Then gives every thread of ATen's
// pool an alternate signal stack (signals::use_signal_stack; util/signals.h says why).
void set_threads(int n);
// OpenBLAS's thread count (-1 when the BLAS is not OpenBLAS).
int blas_threads();
// How many threads ropelab's own kernels (an at::parallel_for compiled into ropelab) run on
// now: ATen's thread count when ropelab was built with OpenMP, as it must be, else 1 (the
// header template's parallel body exists only under -fopenmp).
int kernel_threads();
// The OpenMP wait policy in force ("PASSIVE", "ACTIVE", or the default).
std::string openmp_wait_policy();

// Directory of the running executable (to find the SentencePiece module next to it).
std::string executable_dir();
// The running executable's own path (for child processes of the same program, whatever its file
// is named).
std::string executable_path();

// A file of the project's scripts/ directory (plot_runs.py, bench_pytorch.py):
// $ROPELAB_SCRIPTS_DIR, else scripts/ of the source tree the binary was built from (found next
// to build/bin/), else the directory recorded at configure time.
std::string script_path(const std::string& name);

// `s` as one single-quoted POSIX shell word (for commands run through std::system).
std::string shell_quote(const std::string& s);

}  // namespace ropelab::platform
