// Run metrics: metrics.h5 (documented in README, readable with h5py) plus a line-buffered
// metrics.jsonl copy that survives any crash.
//
//   metrics.h5
//     /            attrs: format="ropelab.metrics", format_version=1, config (resolved YAML),
//                  position, task, arch, attention, params, ropelab_version
//     /train/<series>   float64 [n]  step, tokens, loss, ppl, acc, (bpb), lr, grad_norm,
//     tokens_per_s /valid/<series>   float64 [n]  step, tokens, loss, ppl, acc, (bpb), lr,
//     tokens_per_s
// Every series of a group has the same length. The file is flushed every 20 appends and on
// close, so a killed run leaves a readable file; before each checkpoint commits, sync() makes
// every row up to it durable, so a resumed run never has holes. On resume, rows past the
// checkpoint's step are dropped (they would be logged again).
#pragma once
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "util/h5.h"

namespace ropelab::train {

class MetricsLog {
 public:
  MetricsLog(const std::string& run_dir, const std::map<std::string, std::string>& attrs,
             int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // One row of a group ("train" or "valid"). Keys must stay the same within a group.
  void log(const std::string& group, const std::map<std::string, double>& row);
  void flush();
  // flush() + fsync of metrics.h5 and metrics.jsonl (UserError naming the file on failure).
  void sync();

 private:
  std::string path_, jpath_;
  h5::Handle file_;
  std::map<std::string, h5::Handle> groups_;
  std::map<std::string, std::map<std::string, std::unique_ptr<h5::Series>>> series_;
  FILE* jsonl_ = nullptr;
  int64_t since_flush_ = 0;
};

// Reads a group of metrics.h5 back: series name -> values.
std::map<std::string, std::vector<double>> read_metrics(const std::string& path,
                                                        const std::string& group);
std::map<std::string, std::string> read_metric_attrs(const std::string& path);

}  // namespace ropelab::train
