// Hybrid layouts (model.layout) and the attention switches (QK-norm, sinks, SSMax): the config
// (kinds, the pattern, what a kind inherits, every bad layout named by its key), the model's
// properties (a one-kind layout is today's model bit for bit; a window of W >= T is global
// attention; cached decoding with a ring buffer of W keys equals the full forward pass), and the
// tiled kernel's sinks against the quadratic form. The numbers themselves are checked against
// the PyTorch reference by the golden tests (decoder-layout-*, *-switches).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/layout.h"
#include "config/loader.h"
#include "data/batches.h"
#include "data/tokens.h"
#include "eval/evaluate.h"
#include "helpers.h"
#include "model/attention.h"
#include "model/tiled_attention.h"
#include "model/transformer.h"
#include "model_helpers.h"
#include "tensor_helpers.h"

namespace ropelab {
namespace {

using test::TempDir;
using test::write;

std::vector<config::Problem> problems_of(const std::string& yaml,
                                         const std::vector<std::string>& ov = {}) {
  TempDir d;
  try {
    config::load_config(write(d.file("c.yaml"), yaml), config::overrides_from_args(ov));
  } catch (const config::ConfigError& e) {
    return e.problems();
  }
  return {};
}

const char* kBase = "task: {type: clm}\nmodel:\n  n_layers: 4\n";

// RNoPE-SWA: three sliding-window RoPE layers, one global NoPE layer.
const char* kRnopeSwa =
    "  layout:\n"
    "    pattern: [local, local, local, global]\n"
    "    kinds:\n"
    "      local: {window: 64}\n"
    "      global: {position: {type: none}}\n";

TEST(LayoutConfig, KindsInheritModelPositionAndRoundTrip) {
  TempDir d;
  auto c = config::load_config(write(d.file("a.yaml"), std::string(kBase) + kRnopeSwa),
                               config::overrides_from_args({"model.position.base=500"}));
  const auto& local = c.model.layout.kinds.at("local");
  ASSERT_TRUE(local.window.has);
  EXPECT_EQ(local.window.value, 64);
  EXPECT_FALSE(local.chunk.has);
  // No position section: model.position as the overrides left it.
  EXPECT_EQ(std::get<config::RopeConfig>(local.position.opts).base, 500.0);
  EXPECT_STREQ(c.model.layout.kinds.at("global").position.type(), "none");
  EXPECT_EQ(config::layer_kinds(c.model.layout, 6),
            (std::vector<std::string>{"local", "local", "local", "global", "local", "local"}));
  // The dump states every kind whole (an absent chunk as ~) and loads back the same.
  const std::string dumped = config::dump(c);
  auto again = config::load_config(write(d.file("b.yaml"), dumped));
  EXPECT_EQ(config::dump(again), dumped);
  EXPECT_NE(dumped.find("chunk: ~"), std::string::npos) << dumped;
  // A kind set by an override, by its dotted path.
  auto o = config::load_config(write(d.file("c.yaml"), std::string(kBase) + kRnopeSwa),
                               config::overrides_from_args({"model.layout.kinds.local.window=8"}));
  EXPECT_EQ(o.model.layout.kinds.at("local").window.value, 8);
}

TEST(LayoutConfig, SummaryAndRopeScalingPerKind) {
  TempDir d;
  auto c = config::load_config(write(d.file("a.yaml"), std::string(kBase) + kRnopeSwa));
  EXPECT_EQ(config::position_summary(c.model), "3x local (rope, window 64) + global (none)");
  // Context extension at evaluation: the kinds named after @, or every RoPE kind.
  EXPECT_EQ(eval::rope_scaling_overrides("yarn:4", c.model, c.task.seq_len),
            (std::vector<std::string>{"model.layout.kinds.local.position.scaling.type=yarn",
                                      "model.layout.kinds.local.position.scaling.factor=4"}));
  EXPECT_EQ(eval::rope_scaling_overrides("linear:8@local", c.model, c.task.seq_len).size(), 2u);
  auto refused = [&](const std::string& spec, const std::string& words) {
    try {
      eval::rope_scaling_overrides(spec, c.model, c.task.seq_len);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused("linear:8@global", "not rope");
  refused("linear:8@far", "no layout kind 'far'");
  refused("linear:8@", "name the kinds");
  EXPECT_EQ(eval::rope_scaling_tag("linear:8@local"), "rope-linear-8-local");
  // The overrides load: the named kind scales, the others stay as trained.
  std::vector<config::Override> ov;
  for (const auto& o : eval::rope_scaling_overrides("linear:8@local", c.model, c.task.seq_len))
    ov.push_back({o});
  auto scaled = config::load_config(d.file("a.yaml"), ov);
  const auto& rope =
      std::get<config::RopeConfig>(scaled.model.layout.kinds.at("local").position.opts);
  EXPECT_STREQ(rope.scaling.type(), "linear");
  EXPECT_STREQ(std::get<config::RopeConfig>(scaled.model.position.opts).scaling.type(), "none");
}

TEST(LayoutConfig, BadLayoutsNameTheirKey) {
  struct Bad {
    std::string yaml, key, words;
  };
  const std::vector<Bad> bad = {
      {"  layout: {pattern: [local, globl], kinds: {local: {window: 4}, global: {}}}\n",
       "model.layout.pattern[1]", "unknown kind 'globl'"},
      {"  layout: {kinds: {local: {window: 0}}}\n", "model.layout.kinds.local.window",
       "out of range"},
      {"  layout: {kinds: {local: {window: -3}}}\n", "model.layout.kinds.local.window",
       "out of range"},
      {"  layout: {kinds: {local: {window: 4, chunk: 8}}}\n", "model.layout.kinds.local.chunk",
       "not both"},
      {"  attention: {kernel: linear}\n  layout: {kinds: {local: {window: 4}}}\n",
       "model.layout.kinds.local.window", "linear attention"},
      {"  layout: {kinds: {a: {}, b: {}}}\n", "model.layout.pattern", "which layer is which"},
      {"  layout: {pattern: [a, a, a, a, b], kinds: {a: {}, b: {}}}\n", "model.layout.pattern",
       "the model has 4"},
      {"  layout: {pattern: [a, b], kinds: {a: {position: {type: learned}}, b: {}}}\n",
       "model.layout.kinds.a.position.type", "input embeddings"},
      {"  layout: {kinds: {a: {position: {type: rope, rotary_dim: 7}}}}\n",
       "model.layout.kinds.a.position.rotary_dim", "even"},
      {"  layout: {kinds: {a.b: {}}}\n", "model.layout.kinds", "not a name"},
      {"  layout: {pattern: [a]}\n", "model.layout.pattern", "defines none"},
      {"  attention: {kernel: linear, sinks: true}\n", "model.attention.sinks", "softmax"},
  };
  for (const auto& b : bad) {
    auto ps = problems_of(std::string(kBase) + b.yaml);
    ASSERT_EQ(ps.size(), 1u) << b.yaml << config::ConfigError(ps).what();
    EXPECT_EQ(ps[0].key, b.key) << b.yaml;
    EXPECT_NE(ps[0].message.find(b.words), std::string::npos) << b.yaml << ps[0].str();
  }
}

// ---- the model

model::Transformer build(const config::ModelConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  return model::Transformer(c, 30);
}

config::LayerKindConfig kind(const std::string& pos, int64_t window = 0, int64_t chunk = 0) {
  config::LayerKindConfig k;
  k.position = test::position(pos);
  if (window > 0) k.window = config::Maybe<int64_t>::of(window);
  if (chunk > 0) k.chunk = config::Maybe<int64_t>::of(chunk);
  return k;
}

TEST(LayoutModel, OneKindIsTodaysModelBitForBit) {
  for (const char* arch : {"decoder", "encoder"})
    for (const char* pos : {"rope", "t5", "learned", "alibi"}) {
      auto plain = test::tiny_model(arch, pos);
      if (std::string(pos) == "learned")
        std::get<config::LearnedConfig>(plain.position.opts).max_len = 16;
      auto one = plain;
      one.layout.kinds["all"] = config::LayerKindConfig{};
      one.layout.kinds["all"].position = plain.position;
      auto wide = one;  // a window at least as long as the input is global attention
      wide.layout.kinds["all"].window = config::Maybe<int64_t>::of(12);
      auto a = build(plain, 7), b = build(one, 7), w = build(wide, 7);
      auto names = [](const model::Transformer& m) {
        std::vector<std::string> out;
        for (const auto& p : m->named_parameters()) out.push_back(p.key());
        return out;
      };
      ASSERT_EQ(names(a), names(b)) << pos;
      ASSERT_EQ(names(a), names(w)) << pos;
      for (auto* m : {&a, &b, &w}) (*m)->eval();
      auto tokens = torch::randint(0, 30, {2, 12});
      torch::NoGradGuard ng;
      auto run = [&](model::Transformer& m) {
        return std::string(arch) == "decoder" ? m->decode(tokens) : m->encode(tokens, {});
      };
      auto ya = run(a);
      EXPECT_TRUE(torch::equal(ya, run(b))) << arch << " " << pos;
      EXPECT_TRUE(torch::equal(ya, run(w))) << arch << " " << pos;
    }
}

// Each kind its own module, named by the kind; the layers of a kind share it.
TEST(LayoutModel, EachKindHasItsOwnPositionModule) {
  auto c = test::tiny_model("decoder", "t5");
  c.n_layers = 4;
  c.layout.pattern = {"local", "local", "local", "global"};
  c.layout.kinds["local"] = kind("alibi", 3);
  c.layout.kinds["global"] = kind("t5");
  auto m = build(c, 1);
  std::vector<std::string> position_params;
  for (const auto& p : m->named_parameters())
    if (p.key().find("position") != std::string::npos) position_params.push_back(p.key());
  EXPECT_EQ(position_params, std::vector<std::string>{"decoder.position_global.table"});
}

// Cached decoding equals the full forward pass for every span, and a sliding-window or chunked
// layer keeps O(window) keys: its ring buffer, not the whole past.
TEST(LayoutModel, RingBufferDecodingEqualsTheFullForward) {
  struct Case {
    std::string name, local_pos;
    int64_t window, chunk;
    bool switches;
  };
  for (const auto& cs : std::vector<Case>{{"window rope", "rope", 3, 0, false},
                                          {"chunk rope", "rope", 0, 4, false},
                                          {"window t5", "t5", 3, 0, false},
                                          {"window alibi", "alibi", 5, 0, false},
                                          {"window kerple", "kerple", 3, 0, false},
                                          {"window rope + switches", "rope", 3, 0, true},
                                          {"window fox", "fox", 3, 0, false}}) {
    auto c = test::tiny_model("decoder", "rope");
    c.n_layers = 2;
    c.layout.pattern = {"local", "global"};
    c.layout.kinds["local"] = kind(cs.local_pos, cs.window, cs.chunk);
    c.layout.kinds["global"] = kind("none");
    c.layout.kinds["global"].temperature.scale = 0.5;
    c.layout.kinds["global"].temperature.floor = 3;
    if (cs.switches) {
      c.attention.qk_norm = c.attention.sinks = true;
      c.attention.ssmax = 0.8;
    }
    auto m = build(c, 11);
    for (auto& p : m->named_parameters())  // sinks and gates away from their zero start
      if (p.key().find("sinks") != std::string::npos || p.key().find("gates") != std::string::npos)
        p.value().data().uniform_(-1.0, 1.0);
    m->eval();
    torch::NoGradGuard ng;
    auto tokens = torch::randint(0, 30, {2, 20});
    auto full = m->decode(tokens);
    model::DecodeState st;
    std::vector<torch::Tensor> steps{m->decode(tokens.narrow(1, 0, 5), {}, {}, &st)};
    const int64_t span = cs.window > 0 ? cs.window : cs.chunk;
    const bool trims = cs.local_pos != "fox";  // a data-dependent family keeps every key
    for (int64_t t = 5; t < 20; ++t) {
      steps.push_back(m->decode(tokens.narrow(1, t, 1), {}, {}, &st));
      const int64_t held = st.layers[0].k_BNSH.size(2);
      if (trims) {
        EXPECT_LE(held, span) << cs.name << " at " << t;
        EXPECT_LE(st.layers[0].k_buf.size(2), std::max<int64_t>(64, 2 * span)) << cs.name;
      }
      EXPECT_EQ(st.layers[1].k_BNSH.size(2), t + 1) << cs.name;
    }
    EXPECT_TRUE(test::close(torch::cat(steps, 1), full, 1e-4, 1e-5)) << cs.name;
    // Beam search: swap the rows and go on; row 0 now continues row 1.
    auto next = torch::randint(0, 30, {2, 1});
    st.reorder(torch::tensor({1, 0}));
    auto swapped = m->decode(next, {}, {}, &st);
    auto want = m->decode(torch::cat({tokens.flip(0), next}, 1)).narrow(1, 20, 1);
    EXPECT_TRUE(test::close(swapped, want, 1e-4, 1e-5)) << cs.name << " after reorder";
  }
}

// Long inputs take the tiled kernel: a window there gives what the quadratic form gives.
TEST(LayoutModel, TiledWindowEqualsTheQuadraticForm) {
  auto c = test::tiny_model("decoder", "rope");
  c.layout.pattern = {"local", "global"};
  c.layout.kinds["local"] = kind("alibi", 100);
  c.layout.kinds["global"] = kind("rope");
  c.attention.sinks = true;
  auto m = build(c, 3);
  for (auto& p : m->named_parameters())
    if (p.key().find("sinks") != std::string::npos) p.value().data().uniform_(-1.0, 1.0);
  m->eval();
  torch::NoGradGuard ng;
  const int64_t T = model::kTiledFrom + 37;
  auto tokens = torch::randint(0, 30, {1, T});
  auto tiled = m->decode(tokens);
  // The same positions one query at a time from a cache (the quadratic form, a ring buffer).
  model::DecodeState st;
  auto prompt = m->decode(tokens.narrow(1, 0, 900), {}, {}, &st);
  std::vector<torch::Tensor> steps{prompt};
  for (int64_t t = 900; t < T; ++t) steps.push_back(m->decode(tokens.narrow(1, t, 1), {}, {}, &st));
  EXPECT_TRUE(test::close(torch::cat(steps, 1), tiled, 1e-3, 1e-4));
}

// ---- document-masked packing

// A packed window gives each document what it gets alone: outputs over documents of 5, 7 and 4
// tokens equal three separate runs, for every kind of position signal and span.
TEST(Packing, APackedWindowEqualsEachDocumentAlone) {
  struct Case {
    std::string arch, pos, layout;
  };
  std::vector<Case> cases;
  for (const char* pos : {"none", "sinusoidal", "learned", "t5", "rope", "alibi", "xpos", "kerple",
                          "fox", "cope", "path", "pope", "comrope"})
    cases.push_back({"decoder", pos, ""});
  for (const char* pos : {"sinusoidal", "learned", "t5", "rope", "alibi"})
    cases.push_back({"encoder", pos, ""});
  for (const char* layout : {"swa", "chunks", "switches"})
    cases.push_back({"decoder", "rope", layout});
  cases.push_back({"encoder", "rope", "swa"});
  const std::vector<int64_t> lengths = {5, 7, 4};
  for (const auto& cs : cases) {
    auto c = test::tiny_model(cs.arch, cs.pos);
    if (auto* l = std::get_if<config::LearnedConfig>(&c.position.opts)) l->max_len = 16;
    if (cs.layout == "swa" || cs.layout == "chunks") {
      c.layout.pattern = {"local", "global"};
      c.layout.kinds["local"] = cs.layout == "swa" ? kind("rope", 3) : kind("rope", 0, 3);
      c.layout.kinds["global"] = kind("none");
      c.layout.kinds["global"].temperature.scale = 0.5;
      c.layout.kinds["global"].temperature.floor = 2;
    }
    if (cs.layout == "switches") {
      c.attention.qk_norm = c.attention.sinks = true;
      c.attention.ssmax = 0.8;
    }
    auto m = build(c, 21);
    for (auto& p : m->named_parameters())
      if (p.key().find("sinks") != std::string::npos || p.key().find("gates") != std::string::npos)
        p.value().data().uniform_(-1.0, 1.0);
    m->eval();
    torch::NoGradGuard ng;
    auto tokens = torch::randint(0, 30, {1, 16});
    std::vector<int64_t> ids;
    for (size_t d = 0; d < lengths.size(); ++d) ids.insert(ids.end(), lengths[d], d);
    auto docs = torch::tensor(ids).view({1, 16});
    const bool dec = cs.arch == "decoder";
    auto packed = dec ? m->decode(tokens, {}, {}, nullptr, docs) : m->encode(tokens, {}, {}, docs);
    int64_t start = 0;
    for (int64_t len : lengths) {
      auto alone_tokens = tokens.narrow(1, start, len);
      auto alone = dec ? m->decode(alone_tokens) : m->encode(alone_tokens, {});
      EXPECT_TRUE(test::close(packed.narrow(1, start, len), alone, 1e-4, 1e-5))
          << cs.arch << " " << cs.pos << " " << cs.layout << " document at " << start;
      start += len;
    }
  }
}

// From kTiledFrom tokens on the packed window takes the tiled kernel: its document masks too.
TEST(Packing, TiledDocumentsEqualEachDocumentAlone) {
  for (const char* pos : {"rope", "alibi"}) {
    auto m = build(test::tiny_model("decoder", pos), 8);
    m->eval();
    torch::NoGradGuard ng;
    const int64_t T = model::kTiledFrom + 100, first = 700;
    auto tokens = torch::randint(0, 30, {1, T});
    auto docs = (torch::arange(T) >= first).to(torch::kInt64).view({1, T});
    auto packed = m->decode(tokens, {}, {}, nullptr, docs);
    EXPECT_TRUE(test::close(packed.narrow(1, first, T - first),
                            m->decode(tokens.narrow(1, first, T - first)), 1e-3, 1e-4))
        << pos;
  }
}

// The streams give each window's document ids: a causal LM's EOS starts the next document, an
// MLM's SEP closes its own; ids count from the window's first token.
TEST(Packing, StreamsMarkTheDocuments) {
  auto ds = data::empty_dataset(config::DataKind::kLm);
  ds.vocab_size = 40;
  ds.split = "train";
  for (int len : {3, 5, 2, 9, 4}) ds.lm().text.push(std::vector<int32_t>(len, 20));
  data::StreamOptions o;
  o.batch_size = 1;
  o.seq_len = 8;
  o.shuffle = false;
  auto plain = data::make_lm_stream(ds, o)->batch(0, 0);
  EXPECT_FALSE(plain.doc_BT.defined());
  o.documents = true;
  auto clm = data::make_lm_stream(ds, o)->batch(0, 0);
  // tokens: d0 d0 d0 EOS d1 d1 d1 d1 | the EOS begins document 1
  EXPECT_TRUE(torch::equal(clm.doc_BT, torch::tensor({0, 0, 0, 1, 1, 1, 1, 1}).view({1, 8})));
  auto second = data::make_lm_stream(ds, o)->batch(0, 1);  // d1 EOS d2 d2 EOS d3 d3 d3
  EXPECT_TRUE(torch::equal(second.doc_BT, torch::tensor({0, 1, 1, 1, 2, 2, 2, 2}).view({1, 8})));
  auto mlm = data::make_mlm_stream(ds, o)->batch(0, 0);
  // [CLS] d0 d0 d0 SEP d1 d1 [SEP]: the SEP closes document 0
  EXPECT_TRUE(torch::equal(mlm.doc_BT, torch::tensor({0, 0, 0, 0, 0, 1, 1, 1}).view({1, 8})));
}

TEST(Packing, ConfigKeyAndWhatItRefuses) {
  EXPECT_TRUE(problems_of("task: {type: clm, packing: documents}\n").empty());
  EXPECT_TRUE(
      problems_of("task: {type: mlm, packing: documents}\nmodel: {arch: encoder}\n").empty());
  auto fire =
      problems_of("task: {type: clm, packing: documents}\nmodel: {position: {type: fire}}\n");
  ASSERT_EQ(fire.size(), 1u) << config::ConfigError(fire).what();
  EXPECT_EQ(fire[0].key, "task.packing");
  auto translation = problems_of(
      "task: {type: translation, packing: documents}\nmodel: {arch: encdec}\n"
      "data: {source: bible-en-es}\n");
  ASSERT_EQ(translation.size(), 1u) << config::ConfigError(translation).what();
  EXPECT_EQ(translation[0].key, "task.packing");
  EXPECT_NE(translation[0].message.find("unknown key"), std::string::npos);
}

// ---- sinks in the tiled kernel

TEST(Sinks, TiledKernelEqualsTheQuadraticFormWithGradients) {
  torch::manual_seed(5);
  const int64_t B = 2, N = 3, T = 29, H = 8;
  for (bool fused : {true, false}) {
    model::TileMask mask;
    mask.causal = true;
    mask.window = 9;
    auto q = torch::randn({B, N, T, H}, torch::requires_grad());
    auto k = torch::randn({B, N, T, H}, torch::requires_grad());
    auto v = torch::randn({B, N, T, H}, torch::requires_grad());
    auto sink = (torch::randn({N}) * 2).requires_grad_();
    auto out = model::tiled_attention(q, k, v, mask, {}, {8, 4, fused}, sink);
    auto ref = model::tiled_attention_reference(q, k, v, mask, {}, sink);
    EXPECT_TRUE(test::close(out, ref, 1e-5, 1e-5)) << "fused " << fused;
    auto g = torch::randn_like(out);
    auto ga = torch::autograd::grad({out}, {q, k, v, sink}, {g});
    auto gb = torch::autograd::grad({ref}, {q, k, v, sink}, {g});
    for (size_t i = 0; i < ga.size(); ++i)
      EXPECT_TRUE(test::close(ga[i], gb[i], 1e-4, 1e-5)) << "grad " << i << " fused " << fused;
  }
}

// A very negative sink is no sink; a very positive one takes all the attention.
TEST(Sinks, LimitsAreSoftmaxAndNothing) {
  torch::manual_seed(6);
  auto q = torch::randn({1, 2, 5, 4}), k = torch::randn({1, 2, 5, 4}),
       v = torch::randn({1, 2, 5, 4});
  model::AttnMask mask;
  mask.causal = true;
  auto plain = model::softmax_attention(q, k, v, {}, mask, 0, 0.0, false);
  auto none = model::softmax_attention(q, k, v, {}, mask, 0, 0.0, false, torch::full({2}, -100.0));
  auto all = model::softmax_attention(q, k, v, {}, mask, 0, 0.0, false, torch::full({2}, 100.0));
  EXPECT_TRUE(test::close(none, plain, 1e-6, 1e-6));
  EXPECT_LT(all.abs().max().item<double>(), 1e-20);
}

// SSMax's n: the keys each query may see under causal, window and chunk rules.
TEST(Ssmax, CountsTheVisibleKeys) {
  model::AttnMask m;
  m.causal = true;
  auto n = [&](int64_t T, int64_t S, int64_t off) {
    return model::log_visible_keys(m, T, S, off, torch::kCPU)
        .exp()
        .round()
        .to(torch::kInt64)
        .flatten();
  };
  EXPECT_TRUE(torch::equal(n(4, 4, 0), torch::tensor({1, 2, 3, 4})));
  m.window = 2;
  EXPECT_TRUE(torch::equal(n(4, 4, 0), torch::tensor({1, 2, 2, 2})));
  m.window = 0;
  m.chunk = 3;
  EXPECT_TRUE(torch::equal(n(5, 5, 0), torch::tensor({1, 2, 3, 1, 2})));
  m.chunk = 0;
  m.causal = false;
  m.window = 2;
  EXPECT_TRUE(torch::equal(n(4, 4, 0), torch::tensor({2, 3, 3, 2})));
  // A decoding step: one query at position 9 over the keys kept from position 7.
  m.causal = true;
  m.k_offset = 7;
  m.window = 3;
  EXPECT_TRUE(torch::equal(n(1, 3, 9), torch::tensor({3})));
}

}  // namespace
}  // namespace ropelab
