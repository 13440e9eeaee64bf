// `ropelab eval RUN --ids FILE` (eval/ids.h): on imported Hugging Face fixtures, whose logits come
// from an independent float64 PyTorch implementation (scripts/golden/hf_fixtures.py), the logits
// written for the checkpoint's own ids are the reference logits in the checkpoint's column order,
// and the NLL printed is the one those reference logits give. Bad id files exit with one line.
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "eval/ids.h"
#include "helpers.h"
#include "hf/import.h"
#include "hf/safetensors.h"
#include "hf_helpers.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"

namespace ropelab::eval {
namespace {

namespace stdfs = std::filesystem;
using test::kHfDir;
using test::tensor;

// The ids of `t` [B, T] as JSON lines, one sequence a line (every other one as an object).
std::string json_lines(const at::Tensor& t) {
  std::string s;
  for (int64_t b = 0; b < t.size(0); ++b) {
    auto row = t[b].contiguous();
    nlohmann::json ids(
        std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()));
    s += (b % 2 == 1 ? nlohmann::json{{"input_ids", ids}} : ids).dump() + "\n";
  }
  return s;
}

TEST(EvalIds, LogitsAndNllAreTheReferenceOnesInTheCheckpointsNumbering) {
  // Qwen3 (QK-norm, wide heads) and a sliding-window Mistral: the checkpoint's ids differ from
  // ropelab's re-numbered ones (bos, eos and pad move to ropelab's special ids).
  for (const char* fixture : {"qwen3", "mistral-swa", "llama"}) {
    SCOPED_TRACE(fixture);
    test::TempDir d;
    hf::import_hf(kHfDir + "/" + fixture, d.file("run"));
    auto expected = hf::Checkpoint::open(kHfDir + "/" + fixture + "/expected.safetensors");
    auto ids = tensor(expected, "input_ids").to(torch::kLong);
    auto want = tensor(expected, "logits");  // [B, T, V], the checkpoint's columns
    test::write(d.file("ids.jsonl"), json_lines(ids));
    auto r = eval_ids(d.file("run"), d.file("ids.jsonl"), d.file("logits.h5"), true);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(ids.size(0)));
    // The NLL the reference logits give, computed here.
    auto logp = torch::log_softmax(want.to(torch::kFloat64), -1);
    const int64_t T = ids.size(1);
    double total = 0;
    for (int64_t b = 0; b < ids.size(0); ++b) {
      auto next = ids[b].slice(0, 1).unsqueeze(1);
      double sum = -logp[b].slice(0, 0, T - 1).gather(1, next).sum().item<double>();
      EXPECT_NEAR(r.nll[static_cast<size_t>(b)], sum / static_cast<double>(T - 1), 1e-4) << b;
      total += sum;
    }
    EXPECT_NEAR(r.mean_nll, total / static_cast<double>(ids.size(0) * (T - 1)), 1e-4);
    EXPECT_EQ(r.predicted, ids.size(0) * (T - 1));
    auto f = h5::open_file(d.file("logits.h5"), false);
    for (int64_t b = 0; b < ids.size(0); ++b) {
      const std::string name = "logits/" + std::to_string(b);
      EXPECT_EQ(h5::dataset_shape(f.id(), name, "logits.h5"),
                (std::vector<int64_t>{T, want.size(2)}));
      auto flat = h5::read_f32_flat(f.id(), name, "logits.h5");
      auto got = torch::from_blob(flat.data(), {T, want.size(2)}, torch::kFloat32).clone();
      EXPECT_LT(test::max_diff(got, want[b]), 1e-4) << b;
      EXPECT_EQ(h5::read_i64(f.id(), "input_ids/" + std::to_string(b), "logits.h5"),
                std::vector<int64_t>(ids[b].data_ptr<int64_t>(), ids[b].data_ptr<int64_t>() + T));
    }
    // The same ids as an HDF5 dataset [B, T] (stored as float32 here: read as integers): the same
    // numbers.
    {
      auto h = h5::create_file(d.file("ids.h5"));
      auto c = ids.contiguous();
      std::vector<float> as_float(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
      h5::write_f32_nd(h.id(), "input_ids", as_float.data(),
                       {static_cast<hsize_t>(ids.size(0)), static_cast<hsize_t>(T)});
    }
    auto again = eval_ids(d.file("run"), d.file("ids.h5"), "", true);
    for (size_t b = 0; b < r.nll.size(); ++b) EXPECT_DOUBLE_EQ(again.nll[b], r.nll[b]);
    EXPECT_NE(format_ids(r).find("mean NLL"), std::string::npos);
  }
}

TEST(EvalIds, BadIdFilesAreRefusedNamingTheLine) {
  test::TempDir d;
  hf::import_hf(kHfDir + "/llama", d.file("run"));  // vocabulary 64
  struct Bad {
    std::string text, words;
  };
  for (const auto& b :
       {Bad{"[5, 6, 7]\n[1, 64]\n", "ids.jsonl:2: id 64 is outside"},
        Bad{"[5, 6]\nnot json\n", "ids.jsonl:2: not JSON"},
        Bad{"{\"ids\": [1]}\n", "ids.jsonl:1: expected a list"},
        Bad{"[1, 2.5]\n", "ids.jsonl:1: 2.5 is not a token id"},
        Bad{"[]\n", "ids.jsonl:1: an empty sequence"}, Bad{"\n\n", "no sequences"}}) {
    SCOPED_TRACE(b.words);
    test::write(d.file("ids.jsonl"), b.text);
    try {
      eval_ids(d.file("run"), d.file("ids.jsonl"), d.file("out.h5"), true);
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(b.words), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
    EXPECT_FALSE(stdfs::exists(d.file("out.h5")));
  }
  // An existing --logits file is never overwritten.
  test::write(d.file("ids.jsonl"), "[5, 6, 7]\n");
  test::write(d.file("mine.h5"), "keep");
  EXPECT_THROW(eval_ids(d.file("run"), d.file("ids.jsonl"), d.file("mine.h5"), true), UserError);
  EXPECT_EQ(fs::read_file(d.file("mine.h5")), "keep");
  // A single token predicts nothing: its NLL is not a number, and the mean skips it.
  test::write(d.file("ids.jsonl"), "[5]\n[5, 6, 7]\n");
  auto r = eval_ids(d.file("run"), d.file("ids.jsonl"), "", true);
  EXPECT_TRUE(std::isnan(r.nll[0]));
  EXPECT_DOUBLE_EQ(r.mean_nll, r.nll[1]);
}

}  // namespace
}  // namespace ropelab::eval
