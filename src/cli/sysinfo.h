// `ropelab info` and the BLAS micro-benchmark: what the process is running on.
#pragma once
#include <string>

namespace ropelab::sysinfo {

// Human-readable report: versions, BLAS core, threads, CPU features, SentencePiece module.
std::string report();

// fp32 (and bf16) n x n matmul throughput in this process, GFLOP/s.
struct MatmulRate {
  double fp32_gflops = 0, bf16_gflops = 0;
};
MatmulRate measure_matmul(int n, int repeats);

}  // namespace ropelab::sysinfo
