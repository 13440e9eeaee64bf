#include "cli/sysinfo.h"

#include <torch/torch.h>

#include <chrono>
#include <sstream>

#include "compat/torch_compat.h"
#include "tokenizers/spm_api.h"
#include "tokenizers/tokenizer.h"
#include "util/cuda_info.h"
#include "util/gemm.h"
#include "util/platform.h"

namespace ropelab::sysinfo {

std::string report() {
  std::ostringstream os;
  std::string core = platform::blas_core();
  os << "ropelab " << ROPELAB_VERSION << "\n";
  os << "libtorch: " << compat::libtorch_version() << "\n";
  os << "blas_core: " << core
     << (platform::blas_core_is_generic(core) ? " (generic, slow: set OPENBLAS_CORETYPE)" : "")
     << "\n";
  os << platform::blas_summary() << "\n";
  os << "blas_core_preferred: "
     << (platform::preferred_blas_core().empty() ? "-" : platform::preferred_blas_core()) << "\n";
  os << "fp32_dense_layers: " << util::fp32_gemm_name() << "\n";
  os << "bf16_products: " << util::bf16_products_name() << "\n";
  os << "threads: " << at::get_num_threads() << " (ATen/OpenMP), " << platform::blas_threads()
     << " (OpenBLAS), " << platform::kernel_threads() << " (ropelab's kernels)\n";
  os << "omp_wait_policy: " << platform::openmp_wait_policy() << "\n";
  os << "malloc: "
     << (platform::freed_memory_kept() ? "keeps freed memory (no mmap, no trim)" : "glibc defaults")
     << (platform::malloc_huge_pages() ? ", transparent huge pages" : "") << "\n";
  __builtin_cpu_init();
  os << "cpu: avx2=" << (__builtin_cpu_supports("avx2") ? 1 : 0)
     << " avx512f=" << (__builtin_cpu_supports("avx512f") ? 1 : 0)
     << " amx_bf16=" << (platform::cpu_has_amx_bf16() ? 1 : 0) << "\n";
  os << cuda_info::report();
  std::string spm = tokenizers::spm_module_path();
  try {
    tokenizers::make_spm_backend();
    os << "sentencepiece_module: " << spm << " (ok)\n";
  } catch (const std::exception& e) {
    os << "sentencepiece_module: " << spm << " (NOT LOADABLE: " << e.what() << ")\n";
  }
  return os.str();
}

}  // namespace ropelab::sysinfo
