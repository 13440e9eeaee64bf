// Golden tests: every architecture x position module x attention kernel against the
// independent PyTorch reference (scripts/golden/reference.py, run by Debian's python3-torch,
// the same libtorch version). Outputs and the gradients of every parameter must match.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "model/transformer.h"
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
  config::ModelConfig c;
  c.arch = attr("arch");
  c.d_model = h5::get_attr_int(id, "d_model", path);
  c.n_heads = h5::get_attr_int(id, "n_heads", path);
  c.n_layers = h5::get_attr_int(id, "n_layers", path);
  c.d_ff = h5::get_attr_int(id, "d_ff", path);
  c.dropout = 0.0;
  c.norm = attr("norm");
  c.activation = attr("activation");
  c.scale_embeddings = h5::get_attr_int(id, "scale_embeddings", path) != 0;
  c.tie_embeddings = true;
  std::string pos = attr("position");
  c.position.type = pos == "rope-half" ? "rope" : pos;
  if (pos == "none") c.position.opts = config::NoPositionConfig{};
  if (pos == "sinusoidal") c.position.opts = config::SinusoidalConfig{};
  if (pos == "learned") {
    config::LearnedConfig l;
    l.max_len = h5::get_attr_int(id, "learned_max_len", path);
    c.position.opts = l;
  }
  if (pos == "t5") c.position.opts = config::T5Config{};
  if (pos == "rope" || pos == "rope-half") {
    config::RopeConfig r;
    r.pairing = pos == "rope" ? "interleaved" : "half";
    c.position.opts = r;
  }
  if (pos == "alibi") c.position.opts = config::AlibiConfig{};
  if (pos == "xpos") c.position.opts = config::XposConfig{};
  c.attention.kernel = attr("kernel");
  c.attention.feature_map = attr("feature_map");
  c.attention.rope_mode = attr("rope_mode");
  c.attention.num_features = h5::get_attr_int(id, "num_features", path);
  int64_t vocab = h5::get_attr_int(id, "vocab", path);

  Transformer m(c, vocab);
  m->eval();
  auto params = unpack(id, "params", path);
  auto grads = unpack(id, "grads", path);
  auto buffers = unpack(id, "buffers", path);
  {
    torch::NoGradGuard ng;
    auto named = m->named_parameters();
    ASSERT_EQ(named.size(), params.size()) << "parameter sets differ";
    for (auto& p : named) {
      ASSERT_TRUE(params.count(p.key())) << "reference lacks " << p.key();
      ASSERT_EQ(p.value().sizes(), params[p.key()].sizes()) << p.key();
      p.value().copy_(params[p.key()]);
    }
    auto nb = m->named_buffers();
    for (auto& b : nb)
      if (buffers.count(b.key()))
        b.value().copy_(buffers[b.key()]);
      else if (b.key().find("slopes") == std::string::npos)
        FAIL() << "reference lacks buffer " << b.key();
  }
  auto tokens = read_int_tensor(id, "input/tokens", path, {2, 7});
  auto pad = read_int_tensor(id, "input/pad", path, {2, 7}).to(torch::kBool);
  auto src = read_int_tensor(id, "input/src", path, {2, 6});
  auto src_pad = read_int_tensor(id, "input/src_pad", path, {2, 6}).to(torch::kBool);
  auto want = h5::read_f32(id, "output/logits", path);

  torch::Tensor logits;
  if (c.arch == "decoder") logits = m->lm_logits(m->decode(tokens));
  if (c.arch == "encoder") logits = m->mlm_logits(m->encode(tokens, pad));
  if (c.arch == "encdec")
    logits = m->lm_logits(m->decode(tokens, m->encode(src, src_pad), src_pad));
  auto want_t = torch::from_blob(want.data(), logits.sizes(), torch::kFloat32).clone();
  EXPECT_TRUE(test::close(logits, want_t, 1e-4, 1e-5)) << "logits";

  auto w = torch::cos(torch::arange(logits.numel(), torch::kFloat32) * 0.1).reshape(logits.sizes());
  (logits * w).sum().backward();
  for (const auto& p : m->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient";
    EXPECT_TRUE(test::close(p.value().grad(), grads[p.key()], 1e-3, 1e-4)) << "grad of " << p.key();
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
  // 3 architectures x (8 position variants with softmax + 6 without score biases x 3 linear forms)
  EXPECT_EQ(golden_files().size(), 3u * (8 + 6 * 3));
}

}  // namespace
}  // namespace ropelab::model
