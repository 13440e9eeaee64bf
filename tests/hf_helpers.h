// Helpers of the Hugging Face tests (tests/unit/hf_*_test.cpp): the fixtures that
// scripts/golden/hf_fixtures.py writes under tests/data/hf, their tensors, and copies of them
// with config.json edited.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "helpers.h"
#include "hf/safetensors.h"
#include "util/fs.h"

namespace ropelab::test {

inline const std::string kHfDir = std::string(ROPELAB_SOURCE_DIR) + "/tests/data/hf";

// A fixture tensor (int64 or float32) copied out of a safetensors file.
inline at::Tensor tensor(const hf::Checkpoint& c, const std::string& name) {
  const auto& v = c.get(name);
  auto dt = v.dtype == hf::DType::kI64 ? torch::kLong : torch::kFloat32;
  auto t = torch::empty(v.shape, dt);
  std::memcpy(t.data_ptr(), v.data, v.bytes);
  return t;
}

// The inverse of the import's re-numbering: checkpoint id -> ropelab id.
inline at::Tensor to_ropelab_ids(const std::vector<int64_t>& order, const at::Tensor& ids) {
  auto inv = torch::empty({static_cast<int64_t>(order.size())}, torch::kLong);
  for (size_t r = 0; r < order.size(); ++r) inv[order[r]] = static_cast<int64_t>(r);
  return inv.index_select(0, ids.reshape(-1)).reshape(ids.sizes());
}

// An imported run's vocabulary order (RUN/hf/vocab_order.json).
inline std::vector<int64_t> vocab_order(const std::string& run) {
  return nlohmann::json::parse(fs::read_file(run + "/hf/vocab_order.json"))
      .get<std::vector<int64_t>>();
}

inline double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>();
}

// A copy of a fixture under `d`, with `edit` applied to its config.json.
inline std::string damaged_copy(const TempDir& d, const std::string& fixture,
                                const std::function<void(nlohmann::json&)>& edit) {
  const std::string dir = d.file(fixture);
  std::filesystem::copy(kHfDir + "/" + fixture, dir, std::filesystem::copy_options::recursive);
  auto j = nlohmann::json::parse(fs::read_file(dir + "/config.json"));
  edit(j);
  write(dir + "/config.json", j.dump(2));
  return dir;
}

}  // namespace ropelab::test
