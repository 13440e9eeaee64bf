// Benchmarks that print figures (never timed unit tests: the machines are shared and noisy).
#pragma once
#include <string>

#include "config/schema.h"

namespace ropelab::train {

// Batch-stream throughput next to training throughput for a config, measured in one process,
// side by side: data must never be the bottleneck. Returns a printable report.
std::string bench_data(const config::Config& c, int64_t batches, int64_t train_steps);

}  // namespace ropelab::train
