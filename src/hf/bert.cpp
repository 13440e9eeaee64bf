// BERT (Devlin et al. 2019) checkpoints: BertModel, BertForMaskedLM and
// BertForSequenceClassification onto ropelab's encoder (an MLM run; a GLUE run for the last).
//
// The architectures agree term by term: token + learned absolute position + token type
// embeddings, an embedding LayerNorm, post-LN layers (self-attention with biases, softmax(q k^T /
// sqrt(head)) with padded keys masked; FFN dense, GELU with erf, dense), the MLM head's
// transform (dense, GELU, LayerNorm) and its output layer (the word embeddings when tied) plus a
// bias. Names:
//
//   [bert.]embeddings.word_embeddings          backbone.tok_emb          (rows re-numbered)
//   [bert.]embeddings.position_embeddings      backbone.encoder.position (type learned)
//   [bert.]embeddings.token_type_embeddings    backbone.seg_emb
//   [bert.]embeddings.LayerNorm                backbone.encoder.emb_norm
//   [bert.]encoder.layer.i.attention.self.query/key/value   layers.i.self_attn.q/k/v_proj
//   [bert.]encoder.layer.i.attention.output.dense           layers.i.self_attn.o_proj
//   [bert.]encoder.layer.i.attention.output.LayerNorm       layers.i.norm1
//   [bert.]encoder.layer.i.intermediate.dense / output.dense  layers.i.fc1 / fc2
//   [bert.]encoder.layer.i.output.LayerNorm                 layers.i.norm2
//   cls.predictions.transform.dense / .LayerNorm            head.dense / head.norm
//   cls.predictions.decoder.bias, else .bias; .decoder.weight if untied   head.bias (head.proj)
//   bert.pooler.dense / classifier                          head.pooler / head.classifier
//
// The pooler belongs to ropelab's classification head, so an MLM run leaves it unused. A bare
// BertModel has no MLM head: the run's head is initialised.
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <filesystem>
#include <optional>

#include "hf/family.h"
#include "hf/mapping.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/wordpiece.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::hf {

namespace {

// The data.tokenizer overrides for the checkpoint's WordPiece tokenizer: its vocab.txt, and
// do_lower_case / strip_accents from tokenizer_config.json (BertTokenizer's defaults without it).
std::vector<std::string> wordpiece_overrides(const std::string& dir, const std::string& vocab) {
  const std::string path = dir + "/tokenizer_config.json";
  nlohmann::json j = nlohmann::json::object();
  if (std::filesystem::is_regular_file(path)) {
    try {
      j = nlohmann::json::parse(fs::read_file(path));
    } catch (const nlohmann::json::exception& e) {
      throw UserError(path + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw UserError(path + ": not a JSON object");
  }
  auto flag = [&](const char* key, bool fallback) -> std::optional<bool> {
    if (!j.contains(key)) return fallback;
    if (j[key].is_null()) return std::nullopt;
    if (!j[key].is_boolean()) throw UserError(path + ": " + key + ": expected true or false");
    return j[key].get<bool>();
  };
  const bool lower = flag("do_lower_case", true).value_or(true);
  const auto strip = flag("strip_accents", false);
  const std::string strip_name = !j.contains("strip_accents") || !strip ? "auto"
                                 : *strip                               ? "yes"
                                                                        : "no";
  if (!flag("tokenize_chinese_chars", true).value_or(true))
    throw UserError(path +
                    ": tokenize_chinese_chars: false is not supported (ropelab's "
                    "wordpiece tokenizer always splits CJK ideographs)");
  return {"data.tokenizer.type=wordpiece", "data.tokenizer.model=" + vocab,
          std::string("data.tokenizer.lowercase=") + (lower ? "true" : "false"),
          "data.tokenizer.strip_accents=" + strip_name};
}

}  // namespace

BertShape read_bert_shape(Source& s) {
  BertShape b;
  b.V = s.get_int("vocab_size");
  b.D = s.get_int("hidden_size");
  b.L = s.get_int("num_hidden_layers");
  b.N = s.get_int("num_attention_heads");
  b.F = s.get_int("intermediate_size");
  b.P = s.get_int("max_position_embeddings");
  if (b.V < tokenizers::Special::kCount) s.unsupported("vocab_size", "too small");
  if (b.N <= 0 || b.D % b.N != 0)
    s.unsupported("num_attention_heads", "it does not divide hidden_size");
  b.act = s.get_string("hidden_act", "gelu");
  if (b.act != "gelu" && b.act != "relu")
    s.unsupported("hidden_act", "ropelab has gelu (with erf) and relu");
  if (s.get_int("type_vocab_size", 2) != 2)
    s.unsupported("type_vocab_size", "ropelab's encoder has two segment embeddings");
  if (s.get_bool("is_decoder", false)) s.unsupported("is_decoder", "an encoder as a decoder");
  if (s.get_bool("add_cross_attention", false))
    s.unsupported("add_cross_attention", "an encoder with cross-attention");
  b.tied = s.get_bool("tie_word_embeddings", true);
  b.mlm = s.architecture().find("ForMaskedLM") != std::string::npos;
  b.cls = s.architecture().find("ForSequenceClassification") != std::string::npos;
  if (b.cls) b.labels = read_labels(s);

  // The vocabulary (re-numbered as the wordpiece tokenizer numbers it) and the tokenizer's
  // options.
  const std::string vocab_path = s.dir() + "/vocab.txt";
  auto tokens = tokenizers::read_vocab_txt(vocab_path);
  if (static_cast<int64_t>(tokens.size()) != b.V)
    throw UserError(fmt::format("{}: {} tokens, config.json's vocab_size is {}", vocab_path,
                                tokens.size(), b.V));
  b.order = tokenizers::wordpiece_order(tokens, vocab_path);

  b.overrides = {
      b.cls ? "task.type=glue" : "task.type=mlm",
      "model.arch=encoder",
      "model.d_model=" + std::to_string(b.D),
      "model.n_layers=" + std::to_string(b.L),
      "model.n_heads=" + std::to_string(b.N),
      "model.d_ff=" + std::to_string(b.F),
      "model.norm=post",
      "model.norm_eps=" + exact_number(s.get_double("layer_norm_eps", 1e-12)),
      "model.activation=" + b.act,
      "model.dropout=" + exact_number(s.get_double("hidden_dropout_prob", 0.1)),
      "model.attention.dropout=" + exact_number(s.get_double("attention_probs_dropout_prob", 0.1)),
      "model.init_std=" + exact_number(s.get_double("initializer_range", 0.02)),
      std::string("model.tie_embeddings=") + (b.tied ? "true" : "false"),
      "model.scale_embeddings=false",
  };
  for (auto& o : wordpiece_overrides(s.dir(), vocab_path)) b.overrides.push_back(std::move(o));
  return b;
}

void take_bert_encoder(Source& s, const BertShape& b, const std::string& p, Mapped& m) {
  const int64_t V = b.V, D = b.D, F = b.F, E = b.E > 0 ? b.E : b.D;
  auto order = torch::tensor(b.order, torch::kLong);
  auto& w = m.weights;
  auto linear = [&](const std::string& from, const std::string& to, int64_t in, int64_t outs) {
    w[to + ".weight"] = s.take(from + ".weight", {outs, in});
    w[to + ".bias"] = s.take(from + ".bias", {outs});
  };
  auto norm = [&](const std::string& from, const std::string& to, int64_t width) {
    w[to + ".weight"] = s.take(from + ".weight", {width});
    w[to + ".bias"] = s.take(from + ".bias", {width});
  };
  const std::string e = p + "embeddings.";
  w["backbone.tok_emb.weight"] =
      s.take(e + "word_embeddings.weight", {V, E}).index_select(0, order);
  w["backbone.seg_emb.weight"] = s.take(e + "token_type_embeddings.weight", {2, E});
  norm(e + "LayerNorm", "backbone.encoder.emb_norm", E);
  if (E != D) linear(p + "embeddings_project", "backbone.encoder.emb_proj", E, D);  // RoFormer
  s.skip(e + "position_ids");  // a buffer older versions saved: positions are 0..T-1
  s.skip(e + "token_type_ids");
  for (int64_t i = 0; i < b.L; ++i) {
    const std::string f = fmt::format("{}encoder.layer.{}.", p, i);
    const std::string t = fmt::format("backbone.encoder.layers.{}.", i);
    linear(f + "attention.self.query", t + "self_attn.q_proj", D, D);
    linear(f + "attention.self.key", t + "self_attn.k_proj", D, D);
    linear(f + "attention.self.value", t + "self_attn.v_proj", D, D);
    linear(f + "attention.output.dense", t + "self_attn.o_proj", D, D);
    norm(f + "attention.output.LayerNorm", t + "norm1", D);
    linear(f + "intermediate.dense", t + "fc1", D, F);
    linear(f + "output.dense", t + "fc2", F, D);
    norm(f + "output.LayerNorm", t + "norm2", D);
  }
  if (!b.cls) {
    s.skip(p + "pooler.dense.weight");  // the classification head's; an MLM run has none
    s.skip(p + "pooler.dense.bias");
  }
  if (b.mlm) {
    linear("cls.predictions.transform.dense", "head.dense", D, E);
    norm("cls.predictions.transform.LayerNorm", "head.norm", E);
    // The bias the head adds: transformers 4 shares one tensor between cls.predictions.bias
    // and .decoder.bias (and saves it once, as the first); transformers 5 ties them only with
    // tied embeddings, so an untied head computes with .decoder.bias and leaves the other as
    // initialised. The decoder's, where the file has it, is the one in use either way.
    const bool decoder_bias = s.has("cls.predictions.decoder.bias");
    const std::string live = decoder_bias ? "cls.predictions.decoder.bias" : "cls.predictions.bias";
    w["head.bias"] = s.take(live, {V}).index_select(0, order);
    // Tied: the decoder is the word embeddings (transformers ties them when loading, whatever
    // the file holds); untied: its own matrix.
    if (b.tied)
      s.skip("cls.predictions.decoder.weight");
    else
      w["head.proj.weight"] =
          s.take("cls.predictions.decoder.weight", {V, E}).index_select(0, order);
    if (decoder_bias) s.skip("cls.predictions.bias");
  }
  m.vocab = V;
  m.vocab_order = b.order;
  m.classifier = b.cls;
  m.labels = b.labels;
}

std::vector<std::string> read_labels(Source& s) {
  if (s.get_string("problem_type", "") == "multi_label_classification")
    s.unsupported("problem_type", "ropelab's classification has one label per example");
  if (s.get_string("problem_type", "") == "regression") return {};
  s.use("label2id");  // id2label's inverse: the names come from id2label
  const nlohmann::json* id2label = s.use("id2label");
  if (id2label == nullptr) {  // transformers' default: two labels
    if (s.get_int("num_labels", 2) == 1) return {};
    return {"LABEL_0", "LABEL_1"};
  }
  if (!id2label->is_object() || id2label->empty())
    s.unsupported("id2label", "expected an object of label names by id");
  std::vector<std::string> names(id2label->size());
  for (const auto& [k, v] : id2label->items()) {
    size_t at = 0;
    int64_t id = -1;
    try {
      id = std::stoll(k, &at);
    } catch (const std::exception&) {
    }
    if (at != k.size() || id < 0 || id >= static_cast<int64_t>(names.size()) || !v.is_string())
      s.unsupported("id2label", "expected ids 0..n-1 with string names");
    names[static_cast<size_t>(id)] = v.get<std::string>();
  }
  if (s.get_int("num_labels", static_cast<int64_t>(names.size())) !=
      static_cast<int64_t>(names.size()))
    s.unsupported("num_labels", "id2label names another number of labels");
  if (names.size() == 1) return {};  // one output: a regression head
  return names;
}

static Mapped map_bert(Source& s) {
  BertShape b = read_bert_shape(s);
  if (s.get_string("position_embedding_type", "absolute") != "absolute")
    s.unsupported("position_embedding_type", "only BERT's absolute positions map onto ropelab");
  Mapped m;
  m.overrides = b.overrides;
  m.overrides.push_back("task.seq_len=" + std::to_string(std::min<int64_t>(b.P, 512)));
  m.overrides.push_back("model.position.type=learned");
  m.overrides.push_back("model.position.max_len=" + std::to_string(b.P));
  // A base model's names have no prefix; the task classes put it under "bert.".
  const std::string p = s.has("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  m.weights["backbone.encoder.position.weight"] =
      s.take(p + "embeddings.position_embeddings.weight", {b.P, b.D});
  take_bert_encoder(s, b, p, m);
  if (b.cls) {  // BERT's pooler (tanh) and the classifier
    const int64_t C = std::max<int64_t>(1, static_cast<int64_t>(b.labels.size()));
    m.weights["head.pooler.weight"] = s.take(p + "pooler.dense.weight", {b.D, b.D});
    m.weights["head.pooler.bias"] = s.take(p + "pooler.dense.bias", {b.D});
    m.weights["head.classifier.weight"] = s.take("classifier.weight", {C, b.D});
    m.weights["head.classifier.bias"] = s.take("classifier.bias", {C});
  }
  return m;
}

// ---- export

// What BERT and RoFormer share; "" when the run's encoder is theirs.
std::string encoder_mismatch(const config::Config& c) {
  const auto& m = c.model;
  using namespace config;
  if (m.arch != Arch::kEncoder) return "the model is not an encoder";
  if (m.norm == Norm::kPre || m.norm == Norm::kReordered || m.norm == Norm::kSandwich)
    return std::string(to_string(m.norm)) + " layers (model.norm); BERT's are post-norm";
  if (m.norm_type != NormType::kLayerNorm) return "model.norm_type is not layernorm";
  if (is_gated(m.activation))
    return std::string("a gated feed-forward (") + to_string(m.activation) + ")";
  if (m.activation == Activation::kGeluTanh)
    return "GELU's tanh form (model.activation gelu_tanh; BERT's is gelu with erf)";
  if (m.attention.scale_dim > 0 && m.attention.scale_dim != static_cast<double>(head_dim_of(m)))
    return "a score scale of its own (model.attention.scale_dim)";
  if (m.bias != LinearBias::kAll) return "projections without biases (model.bias)";
  if (m.n_kv_heads != 0 && m.n_kv_heads != m.n_heads) return "grouped-query attention";
  if (m.scale_embeddings) return "scaled embeddings (model.scale_embeddings)";
  if (m.attention.kernel != AttentionKernel::kSoftmax) return "linear attention";
  if (!m.layout.kinds.empty()) return "a hybrid layout (model.layout)";
  if (m.attention.qk_norm) return "QK-norm (model.attention.qk_norm)";
  if (m.head_dim != 0 && m.head_dim * m.n_heads != m.d_model)
    return "a head width other than d_model / n_heads (model.head_dim)";
  const bool mlm = std::holds_alternative<MlmTaskConfig>(c.task.opts),
             glue = std::holds_alternative<GlueTaskConfig>(c.task.opts);
  if (!mlm && !glue) return std::string("task ") + c.task.type() + " has no such class";
  return "";
}

static std::string bert_mismatch(const config::Config& c) {
  std::string why = encoder_mismatch(c);
  if (!why.empty()) return why;
  if (!std::holds_alternative<config::LearnedConfig>(c.model.position.opts))
    return std::string("position ") + c.model.position.type() + " (BERT's are learned)";
  if (c.model.embedding_size > 0 && c.model.embedding_size != c.model.d_model)
    return "an embedding width other than d_model";
  if (std::holds_alternative<config::GlueTaskConfig>(c.task.opts) &&
      c.model.pooler_activation != config::PoolerActivation::kTanh)
    return "a classification head without BERT's tanh pooler";
  return "";
}

void export_bert_encoder(const ExportSource& s, const std::string& p, Exported& e) {
  const auto& m = s.config->model;
  auto put = [&](const std::string& name, const at::Tensor& t) { e.tensors.emplace_back(name, t); };
  auto linear = [&](const std::string& to, const std::string& from) {
    put(to + ".weight", s.at(from + ".weight"));
    put(to + ".bias", s.at(from + ".bias"));
  };
  const std::string em = p + "embeddings.";
  put(em + "word_embeddings.weight", s.rows(s.at("backbone.tok_emb.weight")));
  put(em + "token_type_embeddings.weight", s.at("backbone.seg_emb.weight"));
  linear(em + "LayerNorm", "backbone.encoder.emb_norm");
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string t = fmt::format("{}encoder.layer.{}.", p, i);
    const std::string f = fmt::format("backbone.encoder.layers.{}.", i);
    linear(t + "attention.self.query", f + "self_attn.q_proj");
    linear(t + "attention.self.key", f + "self_attn.k_proj");
    linear(t + "attention.self.value", f + "self_attn.v_proj");
    linear(t + "attention.output.dense", f + "self_attn.o_proj");
    linear(t + "attention.output.LayerNorm", f + "norm1");
    linear(t + "intermediate.dense", f + "fc1");
    linear(t + "output.dense", f + "fc2");
    linear(t + "output.LayerNorm", f + "norm2");
  }
  if (m.embedding_size > 0 && m.embedding_size != m.d_model)  // RoFormer's
    linear(p + "embeddings_project", "backbone.encoder.emb_proj");
  if (std::holds_alternative<config::MlmTaskConfig>(s.config->task.opts)) {
    linear("cls.predictions.transform.dense", "head.dense");
    linear("cls.predictions.transform.LayerNorm", "head.norm");
    // Both names (see the import): transformers 4 reads them as one tensor, transformers 5
    // computes an untied head with the decoder's.
    put("cls.predictions.bias", s.rows(s.at("head.bias")));
    put("cls.predictions.decoder.bias", s.rows(s.at("head.bias")));
    if (!m.tie_embeddings) put("cls.predictions.decoder.weight", s.rows(s.at("head.proj.weight")));
  }
  // The shared keys of config.json.
  auto& j = e.config;
  j["vocab_size"] = s.order.size();
  j["hidden_size"] = m.d_model;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["intermediate_size"] = m.d_ff;
  j["hidden_act"] = config::to_string(m.activation);
  j["hidden_dropout_prob"] = m.dropout;
  j["attention_probs_dropout_prob"] = m.attention.dropout;
  j["type_vocab_size"] = 2;
  j["initializer_range"] = m.init_std;
  j["layer_norm_eps"] = m.norm_eps;
  j["pad_token_id"] = s.order[tokenizers::Special::kPad];
  j["tie_word_embeddings"] = m.tie_embeddings;
  j[s.form == HfConfigForm::kV4 ? "torch_dtype" : "dtype"] = "float32";
  if (std::holds_alternative<config::GlueTaskConfig>(s.config->task.opts)) {
    if (s.labels.empty()) {
      j["num_labels"] = 1;
      j["problem_type"] = "regression";
    } else {
      for (size_t i = 0; i < s.labels.size(); ++i) {
        j["id2label"][std::to_string(i)] = s.labels[i];
        j["label2id"][s.labels[i]] = i;
      }
    }
  }
}

static Exported export_bert(const ExportSource& s) {
  Exported e;
  const bool glue = std::holds_alternative<config::GlueTaskConfig>(s.config->task.opts);
  e.config["architectures"] = {glue ? "BertForSequenceClassification" : "BertForMaskedLM"};
  e.config["model_type"] = "bert";
  e.config["position_embedding_type"] = "absolute";
  const auto& pos = s.at("backbone.encoder.position.weight");
  e.config["max_position_embeddings"] = pos.size(0);
  export_bert_encoder(s, "bert.", e);
  e.tensors.emplace_back("bert.embeddings.position_embeddings.weight", pos);
  if (glue) {
    for (const char* k : {"weight", "bias"}) {
      e.tensors.emplace_back(std::string("bert.pooler.dense.") + k,
                             s.at(std::string("head.pooler.") + k));
      e.tensors.emplace_back(std::string("classifier.") + k,
                             s.at(std::string("head.classifier.") + k));
    }
  }
  return e;
}

const Family& bert_family() {
  static const Family f{
      "BERT",
      config::Arch::kEncoder,
      {
          "BertModel",
          "BertForMaskedLM",
          "BertForSequenceClassification",
      },
      "BertModel",
      map_bert,
      bert_mismatch,
      export_bert,
      nullptr,
  };
  return f;
}

}  // namespace ropelab::hf
