// RoFormer (Su et al. 2021, Eq. 34): RoFormerModel, RoFormerForMaskedLM and
// RoFormerForSequenceClassification onto ropelab's encoder with RoPE. The layers, embeddings and
// MLM head are BERT's (hf/bert.cpp maps them, under "roformer."); there are no position embeddings.
// Instead every layer turns q and k by RoPE with interleaved pairs (2i, 2i+1) and theta_i =
// 10000^(-2i/d), which is ropelab's `rope` with its defaults (pairing interleaved, base 10000).
//
// transformers saves the fixed sinusoid table (roformer.encoder.embed_positions.weight,
// [max_position_embeddings, head dim]: sin(m theta_j) for j < d/2, then cos). The importer
// checks that it holds exactly that table, then leaves it out: ropelab computes the angles.
// RoFormer's classification head is dense -> hidden_act -> out_proj on [CLS], without BERT's
// tanh pooler: ropelab's head with pooler_activation = hidden_act (classifier.dense ->
// head.pooler, classifier.out_proj -> head.classifier).
// An embedding_size other than hidden_size (the small Chinese checkpoints) is ropelab's
// model.embedding_size: embeddings, their LayerNorm and the MLM transform that wide, and
// roformer.embeddings_project onto hidden_size (backbone.encoder.emb_proj).
// Not mapped (refused, naming the key): rotary_value (RoPE on the values too).
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <cmath>

#include "hf/family.h"
#include "hf/mapping.h"
#include "util/error.h"

namespace ropelab::hf {

static Mapped map_roformer(Source& s) {
  BertShape b = read_bert_shape(s);
  b.E = s.get_int("embedding_size", b.D);
  if (b.E <= 0) s.unsupported("embedding_size", "must be positive");
  if (b.E != b.D) b.overrides.push_back("model.embedding_size=" + std::to_string(b.E));
  if (s.get_bool("rotary_value", false))
    s.unsupported("rotary_value", "ropelab's RoPE turns queries and keys only");
  Mapped m;
  m.overrides = b.overrides;
  m.overrides.push_back("task.seq_len=" + std::to_string(std::min<int64_t>(b.P, 512)));
  m.overrides.push_back("model.position.type=rope");
  m.overrides.push_back("model.position.pairing=interleaved");
  m.overrides.push_back("model.position.base=10000");
  const std::string p = s.has("roformer.embeddings.word_embeddings.weight") ? "roformer." : "";

  // The saved sinusoid table must be RoFormer's (then it carries nothing ropelab lacks).
  const std::string table = p + "encoder.embed_positions.weight";
  if (s.has(table)) {
    const int64_t H = b.D / b.N;
    auto t = s.take(table, {b.P, H}).to(torch::kFloat64);
    auto pos = torch::arange(b.P, torch::kFloat64).unsqueeze(1);
    auto theta = torch::pow(10000.0, -2 * torch::arange(H / 2, torch::kFloat64) / H);
    auto want = torch::cat({torch::sin(pos * theta), torch::cos(pos * theta)}, 1);
    double diff = (t - want).abs().max().item<double>();
    if (diff > 1e-4)
      throw UserError(fmt::format(
          "{}: {} differs from RoFormer's sinusoid table by {:.3g}: not a RoFormer checkpoint "
          "ropelab can map",
          s.dir(), table, diff));
  }
  take_bert_encoder(s, b, p, m);
  // RoFormer's classification head (dense, hidden_act, out_proj): also for the GLUE runs that
  // fine-tune an imported RoFormerModel or ...ForMaskedLM.
  m.overrides.push_back("model.pooler_activation=" + b.act);
  if (b.cls) {
    const int64_t C = std::max<int64_t>(1, static_cast<int64_t>(b.labels.size()));
    m.weights["head.pooler.weight"] = s.take("classifier.dense.weight", {b.D, b.D});
    m.weights["head.pooler.bias"] = s.take("classifier.dense.bias", {b.D});
    m.weights["head.classifier.weight"] = s.take("classifier.out_proj.weight", {C, b.D});
    m.weights["head.classifier.bias"] = s.take("classifier.out_proj.bias", {C});
  }
  return m;
}

// ---- export

static std::string roformer_mismatch(const config::Config& c) {
  std::string why = encoder_mismatch(c);
  if (!why.empty()) return why;
  const auto* r = std::get_if<config::RopeConfig>(&c.model.position.opts);
  if (r == nullptr)
    return std::string("position ") + c.model.position.type() + " (RoFormer's is rope)";
  if (r->pairing != config::RopePairing::kInterleaved) return "RoPE on half-split pairs";
  if (r->base != 10000.0) return "a RoPE base other than RoFormer's 10000";
  if (r->rotary_dim != 0 || r->fraction != 1.0) return "partial RoPE";
  if (r->nope_every != 0 || !r->nope_layers.empty()) return "layers without positions";
  if (!std::holds_alternative<config::NoScaling>(r->scaling.opts)) return "RoPE scaling";
  if (c.model.pooler_activation == config::PoolerActivation::kTanh &&
      std::holds_alternative<config::GlueTaskConfig>(c.task.opts))
    return "BERT's tanh pooler (RoFormer's head is dense, hidden_act, out_proj: "
           "model.pooler_activation)";
  if (std::holds_alternative<config::GlueTaskConfig>(c.task.opts) &&
      config::to_string(c.model.pooler_activation) !=
          std::string(config::to_string(c.model.activation)))
    return "a classification head whose activation is not hidden_act";
  return "";
}

static Exported export_roformer(const ExportSource& s) {
  Exported e;
  const auto& c = *s.config;
  const bool glue = std::holds_alternative<config::GlueTaskConfig>(c.task.opts);
  e.config["architectures"] = {glue ? "RoFormerForSequenceClassification" : "RoFormerForMaskedLM"};
  e.config["model_type"] = "roformer";
  const int64_t P = c.task.seq_len, H = c.model.d_model / c.model.n_heads;
  e.config["max_position_embeddings"] = P;
  e.config["embedding_size"] =
      c.model.embedding_size > 0 ? c.model.embedding_size : c.model.d_model;
  e.config["rotary_value"] = false;
  export_bert_encoder(s, "roformer.", e);
  // The fixed sinusoid table transformers keeps: sin(m theta_j) for j < H/2, then cos.
  auto pos = torch::arange(P, torch::kFloat64).unsqueeze(1);
  auto theta = torch::pow(10000.0, -2 * torch::arange(H / 2, torch::kFloat64) / H);
  e.tensors.emplace_back(
      "roformer.encoder.embed_positions.weight",
      torch::cat({torch::sin(pos * theta), torch::cos(pos * theta)}, 1).to(torch::kFloat32));
  if (glue) {
    for (const char* k : {"weight", "bias"}) {
      e.tensors.emplace_back(std::string("classifier.dense.") + k,
                             s.at(std::string("head.pooler.") + k));
      e.tensors.emplace_back(std::string("classifier.out_proj.") + k,
                             s.at(std::string("head.classifier.") + k));
    }
  }
  return e;
}

const Family& roformer_family() {
  static const Family f{
      "RoFormer",
      config::Arch::kEncoder,
      {
          "RoFormerModel",
          "RoFormerForMaskedLM",
          "RoFormerForSequenceClassification",
      },
      "RoFormerModel",
      map_roformer,
      roformer_mismatch,
      export_roformer,
      nullptr,
  };
  return f;
}

}  // namespace ropelab::hf
