// Golden tests: every architecture x position module x attention kernel against the
// independent PyTorch reference (scripts/golden/reference.py, run by Debian's python3-torch,
// the same libtorch version). Outputs and the gradients of every parameter must match.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "helpers.h"
#include "model/heads.h"
#include "model/transformer.h"
#include "model_helpers.h"
#include "tensor_helpers.h"
#include "util/h5.h"

namespace ropelab::model {
namespace {

namespace stdfs = std::filesystem;

struct Golden {
  std::string name;
  h5::Handle file;
};

std::map<std::string, torch::Tensor> unpack(hid_t f, const std::string& group,
                                            const std::string& path) {
  auto flat = h5::read_f32(f, group, path);
  auto index = nlohmann::json::parse(h5::get_attr_str(f, group + "_index", path));
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, entry] : index.items()) {
    int64_t off = entry[0];
    std::vector<int64_t> shape = entry[1];
    int64_t n = 1;
    for (auto s : shape) n *= s;
    out[name] = torch::from_blob(flat.data() + off, {n}, torch::kFloat32).clone().reshape(shape);
  }
  return out;
}

torch::Tensor read_int_tensor(hid_t f, const std::string& name, const std::string& path,
                              std::vector<int64_t> shape) {
  auto v = h5::read_i64(f, name, path);
  return torch::tensor(v, torch::kInt64).reshape(shape);
}

class GoldenModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenModel, OutputsAndGradientsMatchReference) {
  std::string path = GetParam();
  auto f = h5::open_file(path, false);
  hid_t id = f.id();
  auto attr = [&](const char* k) { return h5::get_attr_str(id, k, path); };
  // The model config goes through the real config reader (and its checks): the reference's
  // position block (JSON, which is YAML) in a file with the case's dimensions.
  std::string arch = attr("arch");
  const char* task = arch == "decoder" ? "clm" : arch == "encoder" ? "mlm" : "translation";
  const char* source = arch == "encdec" ? "bible-en-es" : "bible-en";
  auto num = [&](const char* k) { return std::to_string(h5::get_attr_int(id, k, path)); };
  std::string yaml =
      "data: {source: " + std::string(source) + "}\n" + "task: {type: " + task + ", seq_len: 7}\n" +
      "model:\n  arch: " + arch + "\n  d_model: " + num("d_model") +
      "\n  n_heads: " + num("n_heads") + "\n  n_layers: " + num("n_layers") +
      "\n  d_ff: " + num("d_ff") + "\n  dropout: 0\n  norm: " + attr("norm") +
      "\n  activation: " + attr("activation") + "\n  scale_embeddings: " +
      (h5::get_attr_int(id, "scale_embeddings", path) != 0 ? "true" : "false") +
      "\n  tie_embeddings: true\n  position: " + attr("position_config") +
      "\n  attention: {kernel: " + attr("kernel") + ", feature_map: " + attr("feature_map") +
      ", rope_mode: " + attr("rope_mode") + ", num_features: " + num("num_features") + "}\n";
  // The hybrid-layout cases: model.layout (JSON, which is YAML) and the attention switches.
  if (h5::has_attr(id, "layout")) yaml += "  layout: " + attr("layout") + "\n";
  std::vector<config::Override> switches;
  if (h5::has_attr(id, "switches")) {
    const auto on = nlohmann::json::parse(attr("switches"));
    for (auto it = on.begin(); it != on.end(); ++it)
      switches.push_back({"model.attention." + it.key() + "=" + it.value().dump()});
  }
  test::TempDir dir;
  config::ModelConfig c =
      config::load_config(test::write(dir.file("case.yaml"), yaml), switches).model;
  int64_t vocab = h5::get_attr_int(id, "vocab", path);

  // The reference names the backbone's tensors as we do; its MLM head is flat (mlm_dense,
  // mlm_norm, mlm_bias), ours is a module of its own.
  Transformer backbone(c, vocab);
  std::shared_ptr<HeadImpl> head;
  if (c.arch == config::Arch::kEncoder)
    head = std::make_shared<MlmHeadImpl>(c, vocab);
  else
    head = std::make_shared<LmHeadImpl>(c, vocab);
  auto reference_name = [](const std::string& head_name) {
    for (const char* part : {"dense", "norm"})
      if (head_name.rfind(std::string(part) + ".", 0) == 0) return "mlm_" + head_name;
    return head_name == "bias" ? std::string("mlm_bias") : head_name;
  };
  std::vector<std::pair<std::string, torch::Tensor>> named;  // reference name -> our tensor
  for (const auto& p : backbone->named_parameters()) named.emplace_back(p.key(), p.value());
  for (const auto& p : head->named_parameters())
    named.emplace_back(reference_name(p.key()), p.value());
  backbone->eval();
  head->eval();
  auto params = unpack(id, "params", path);
  auto grads = unpack(id, "grads", path);
  auto buffers = unpack(id, "buffers", path);
  {
    torch::NoGradGuard ng;
    ASSERT_EQ(named.size(), params.size()) << "parameter sets differ";
    for (auto& [name, t] : named) {
      ASSERT_TRUE(params.count(name)) << "reference lacks " << name;
      ASSERT_EQ(t.sizes(), params[name].sizes()) << name;
      t.copy_(params[name]);
    }
    auto nb = backbone->named_buffers();
    for (auto& b : nb)
      if (buffers.count(b.key()))
        b.value().copy_(buffers[b.key()]);
      else if (b.key().find("slopes") == std::string::npos &&
               b.key().find("theta") == std::string::npos)  // constants the module derives
        FAIL() << "reference lacks buffer " << b.key();
  }
  auto tokens = read_int_tensor(id, "input/tokens", path, {2, 7});
  auto pad = read_int_tensor(id, "input/pad", path, {2, 7}).to(torch::kBool);
  auto src = read_int_tensor(id, "input/src", path, {2, 6});
  auto src_pad = read_int_tensor(id, "input/src_pad", path, {2, 6}).to(torch::kBool);
  auto want = h5::read_f32(id, "output/logits", path);

  torch::Tensor logits;
  auto& m = backbone;
  if (c.arch == config::Arch::kDecoder) logits = head->forward(m->decode(tokens), *m);
  if (c.arch == config::Arch::kEncoder) logits = head->forward(m->encode(tokens, pad), *m);
  if (c.arch == config::Arch::kEncDec)
    logits = head->forward(m->decode(tokens, m->encode(src, src_pad), src_pad), *m);
  auto want_t = torch::from_blob(want.data(), logits.sizes(), torch::kFloat32).clone();
  EXPECT_TRUE(test::close(logits, want_t, 1e-4, 1e-5)) << "logits";

  auto w = torch::cos(torch::arange(logits.numel(), torch::kFloat32) * 0.1).reshape(logits.sizes());
  (logits * w).sum().backward();
  for (const auto& [name, t] : named) {
    ASSERT_TRUE(t.grad().defined()) << name << " got no gradient";
    EXPECT_TRUE(test::close(t.grad(), grads[name], 1e-3, 1e-4)) << "grad of " << name;
  }
}

std::vector<std::string> golden_files() {
  std::vector<std::string> out;
  for (const auto& e : stdfs::directory_iterator(test::source_dir() + "/tests/data/golden"))
    if (e.path().extension() == ".h5") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllCases, GoldenModel, ::testing::ValuesIn(golden_files()),
                         [](const auto& case_info) {
                           std::string n = stdfs::path(case_info.param).stem().string();
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(GoldenFiles, AllCombinationsArePresent) {
  // 3 architectures x (17 position variants with softmax + the 12 without score biases
  // (none, sinusoidal, learned, rope, rope-half, xpos, rope-p, rope-nope, rope-dynamic,
  // rope-yarn, rope-llama3, rope-longrope) x 3 linear forms), PoPE and ComRoPE (softmax) in
  // the 3 architectures, the causal-only fox, fox-rope, cope and path in the decoder, and
  // M-RoPE on a 3-wide grid in the 3 architectures (with the 4 kernels; its contiguous
  // sections with softmax); and the 8 cases of hybrid layouts and attention switches.
  EXPECT_EQ(golden_files().size(), 3u * (17 + 12 * 3) + 3 + 3 + 4 + 3 * (4 + 1) + 8);
}

}  // namespace
}  // namespace ropelab::model
