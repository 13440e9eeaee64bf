// `ropelab info`: what the process is running on.
#pragma once
#include <string>

namespace ropelab::sysinfo {

// Human-readable report: versions, BLAS core, threads, CPU features, SentencePiece module.
std::string report();

}  // namespace ropelab::sysinfo
