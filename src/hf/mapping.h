// What a class's mapping (hf/bert.cpp, ...) reads and fills, for hf/import.cpp. Not for use
// outside src/hf.
#pragma once
#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hf/export.h"
#include "hf/import.h"
#include "hf/safetensors.h"

namespace ropelab::hf {

// An opened checkpoint directory. Every tensor and every config.json key a mapping reads is
// marked as used: the importer refuses a checkpoint with tensors no mapping used, and a config
// key that is neither used nor listed as irrelevant (hf/config_keys.cpp), since either would be
// silently dropped.
class Source {
 public:
  explicit Source(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const std::string& architecture() const { return architecture_; }
  std::string config_path() const;

  // config.json values; UserError "DIR/config.json: KEY: ..." when absent or of another type.
  // Each marks KEY as used, present or not.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // config.json's value of KEY (nullptr when absent or null), marking KEY as used.
  const nlohmann::json* use(const std::string& key) const;
  // Whether config.json has KEY with a value other than null (does not mark it).
  bool present(const std::string& key) const;
  // The whole of config.json, for the key check (hf/config_keys.cpp): marks nothing.
  const nlohmann::json& config() const { return config_; }
  bool used_key(const std::string& key) const { return used_keys_.count(key) != 0; }
  // A config value ropelab cannot represent: the UserError names the key and its value.
  [[noreturn]] void unsupported(const std::string& key, const std::string& why) const;

  // Whether the checkpoint has `name` (after the legacy renames below).
  bool has(const std::string& name) const;
  // The tensor as float32 (copied out of the file), its shape checked against `shape`; marks it
  // used. TF-converted names (LayerNorm.gamma / .beta) are found under .weight / .bias.
  at::Tensor take(const std::string& name, const std::vector<int64_t>& shape);
  // Marks a tensor as deliberately not used (recorded in Imported::unused).
  void skip(const std::string& name);
  // Checkpoint names nobody took or skipped.
  std::vector<std::string> left_over() const;
  const std::vector<std::string>& skipped() const { return skipped_; }
  // Every checkpoint tensor name (after the legacy renames).
  std::vector<std::string> names() const;

 private:
  std::string file_name(const std::string& name) const;  // the name in the file
  std::string dir_, architecture_;
  nlohmann::json config_;
  mutable std::set<std::string> used_keys_;
  Checkpoint ckpt_;
  std::map<std::string, std::string> renamed_;  // modern name -> name in the file
  std::set<std::string> used_;
  std::vector<std::string> skipped_;
};

// A class's mapping: the run's config overrides (dotted key=value), its vocabulary, and every
// tensor under ropelab's names.
struct Mapped {
  std::vector<std::string> overrides;
  int64_t vocab = 0;
  std::vector<int64_t> vocab_order;
  std::map<std::string, at::Tensor> weights;
  // ...ForSequenceClassification: the classifier's rows are the checkpoint's labels, named by
  // config.json's id2label (in id order); import.cpp puts them in the run's data's order.
  bool classifier = false;
  std::vector<std::string> labels;
  std::string note;  // for the import's summary
};

// A config.json number as a model override that reads back as the same double.
std::string exact_number(double v);

// What a class reads of RoPE besides transformers' common keys: its base where config.json gives
// none (SmolLM3's is 2e6), transformers 4's names for the base and the rotating fraction of each
// head (GPT-NeoX: rotary_emb_base, rotary_pct; Phi-3: partial_rotary_factor; "": the class has
// none in 4), that fraction's default (GPT-NeoX: 0.25), and the head width the fraction is of
// (0: the class turns the whole head, and a fraction is refused).
struct RopeClass {
  double default_base = 10000.0;
  std::string v4_theta_key = "rope_theta";
  std::string v4_partial_key;
  double default_partial = 1.0;
  int64_t head_dim = 0;
};
// The RoPE settings of a config.json (hf/rope_params.cpp) as model.position overrides: the base,
// the scaling, then model.position.rotary_dim where part of each head turns. Either of
// transformers' layouts (4: rope_theta and rope_scaling; 5: rope_parameters, flat or nested per
// layer type, with partial_rotary_factor), or both where they agree.
std::vector<std::string> rope_overrides(const Source& s, int64_t max_pos, const RopeClass& c);
// The same for one layer type of a class that reads them per type (Gemma 3): transformers 4's
// base under `v4_theta_key` (and rope_scaling where `v4_scaling`), transformers 5's
// rope_parameters[layer_type] (the nested form only).
struct LayerTypeRope {
  std::string layer_type, v4_theta_key;
  bool v4_scaling = true;
  double default_base = 10000.0;
};
std::vector<std::string> layer_type_rope_overrides(const Source& s, int64_t max_pos,
                                                   const LayerTypeRope& t);
// The run's RoPE as config.json keys in `form` (may also set max_position_embeddings and, for
// transformers 4's LongRoPE, original_max_position_embeddings).
void put_rope(const config::RopeConfig& r, HfConfigForm form, nlohmann::json& j);

// config.json's keys against what the mapping used (hf/config_keys.cpp): a key neither used nor
// irrelevant to the function the model computes is refused (UserError naming it and its value),
// or with `allow_unknown` returned ("key = value") for the summary to list.
std::vector<std::string> check_config_keys(const Source& s, bool allow_unknown);

// One family per file, each with its record (hf/family.h); what several families share is
// declared here.

// What the decoders share (hf/decoder.cpp: the Llama layout and Gemma 3). The checkpoint's
// tokenizer: a byte-level BPE tokenizer.json, else a SentencePiece tokenizer.model; the overrides
// that make the run use it, its unknown token, and the ids that can stand for the specials it
// lacks.
struct LlamaTokenizer {
  std::vector<std::string> overrides;
  int64_t unk = -1;
  std::vector<int64_t> fillers;
  std::string note;
};
LlamaTokenizer tokenizer_of(const Source& s, int64_t V);
// The vocabulary of a decoder checkpoint: its size, the order that puts ropelab's specials
// first (llama_specials' ids; the tokenizer's fillers for the rest), the tokenizer's overrides,
// and the notes of both.
Mapped decoder_vocabulary(const Source& s, int64_t V,
                          const std::map<std::string, int64_t>& defaults = {});
// A config.json activation (GPT-2's activation_function, GPT-NeoX's hidden_act; `fallback`
// where absent) as a non-gated model.activation: gelu (erf), gelu_tanh (gelu_new,
// gelu_pytorch_tanh, gelu_fast: GELU's tanh form) or relu; another is refused naming `key`.
config::Activation plain_activation(const Source& s, const std::string& key,
                                    const std::string& fallback);
// And back: the name for `key` (the imported checkpoint's own where it names the same function).
nlohmann::json hf_activation(config::Activation a, const nlohmann::json& origin,
                             const std::string& key);
// What a GPT-style class (GPT-2, GPT-NeoX: a pre-norm LayerNorm decoder with biases, a plain
// feed-forward, multi-head softmax attention, no layout) cannot say of the run's model, "" if
// nothing; `family` names the class in the reason. Each class adds its positions and scale.
std::string gpt_style_mismatch(const config::Config& c, const std::string& family);
// A LayerNorm's gain and shift, `from`.weight / .bias, as `to`.weight / .bias.
void take_layer_norm(Source& s, const std::string& from, const std::string& to, int64_t D,
                     std::map<std::string, at::Tensor>& w);
// ropelab's special ids (pad, unk, bos, eos, cls, sep, mask) from config.json's eos, bos and pad
// ids (`defaults`: the class's, where config.json has none); `shared` says which share an id.
std::array<int64_t, 7> llama_specials(const Source& s, int64_t V, int64_t unk, std::string& shared,
                                      const std::map<std::string, int64_t>& defaults = {});

// What BERT-layout encoders share (hf/bert.cpp; RoFormer reuses it): config.json's sizes
// (checked), the vocabulary's order from vocab.txt, and the run's model overrides.
struct BertShape {
  int64_t V = 0, D = 0, L = 0, N = 0, F = 0, P = 0;
  int64_t E = 0;  // the embeddings' width (RoFormer's embedding_size); 0: D
  std::string act;
  bool tied = true, mlm = false, cls = false;
  std::vector<std::string> labels;  // cls: id2label's names by id
  std::vector<int64_t> order;
  std::vector<std::string> overrides;
};
BertShape read_bert_shape(Source& s);
// A ...ForSequenceClassification's labels: config.json's id2label names by id (transformers'
// default without it: LABEL_0, LABEL_1); empty for a regression head (one output).
std::vector<std::string> read_labels(Source& s);
// The word and token-type embeddings, the embedding LayerNorm, the layers and (for a
// ...ForMaskedLM class) the MLM head, from names under `prefix` ("bert.", "roformer." or "").
// The classification heads differ (BERT's pooler, RoFormer's head): each family maps its own.
void take_bert_encoder(Source& s, const BertShape& b, const std::string& prefix, Mapped& m);

// ---- export (hf/export.cpp; each family writes its own names)

// A run on its way out: its config, its parameters by ropelab name (float32), and the
// vocabulary's order (ropelab id r is the checkpoint's id order[r]; identity for a vocabulary
// ropelab made).
struct ExportSource {  // NOLINT(bugprone-exception-escape): json's move is noexcept
  const config::Config* config = nullptr;
  HfConfigForm form = HfConfigForm::kV5;
  // An imported run's own config.json (RUN/hf/config.json; null otherwise): its special token
  // ids are the checkpoint's definition, which the export keeps (two specials may share an id).
  nlohmann::json origin;
  std::map<std::string, at::Tensor> weights;
  std::vector<int64_t> order;
  std::vector<std::string> labels;  // a GLUE run's label names (empty: regression)
  // `t`'s rows (one per ropelab id) in the checkpoint's order.
  at::Tensor rows(const at::Tensor& t) const;
  const at::Tensor& at(const std::string& name) const;  // logic_error if absent
};
// What a family writes: config.json (the class's keys) and the tensors by their names.
struct Exported {  // NOLINT(bugprone-exception-escape): json's move is noexcept
  nlohmann::json config;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};
// BERT's embeddings (but positions), layers and MLM head, and the config.json keys BERT and
// RoFormer share, under `prefix` ("bert." or "roformer.").
void export_bert_encoder(const ExportSource& s, const std::string& prefix, Exported& e);
// What an encoder must be for BERT's and RoFormer's classes ("" if it is).
std::string encoder_mismatch(const config::Config& c);
// A decoder checkpoint as a CLM run: its sizes (P the trained context, D wide, L layers, N heads,
// Nkv key/value heads H wide) as the run's first overrides, and its dropout (off unless the class
// trains with one: GPT-2's resid_pdrop, GPT-NeoX's hidden_dropout).
std::vector<std::string> decoder_overrides(int64_t P, int64_t D, int64_t L, int64_t N, int64_t Nkv,
                                           int64_t H, double dropout = 0);
// The model.position overrides of half-split `rope` (rope_overrides') moved under
// model.layout.kinds.KIND.position: a layer type's RoPE of its own (Gemma 3, OLMo 3).
std::vector<std::string> under_kind(const std::vector<std::string>& rope, const std::string& kind);
// An exported decoder's sizes, norm epsilon, tying, dropout, initialiser, special ids and dtype.
void put_decoder_keys(const ExportSource& s, nlohmann::json& j);
// The run's LayerNorm `from` (.weight, .bias) under the checkpoint's name `to`.
void put_layer_norm(const ExportSource& s, const std::string& from, const std::string& to,
                    Exported& e);
// bos_token_id, eos_token_id and pad_token_id: the checkpoint's own where the run was imported
// (two may share an id, and eos may be a list), else the tokens at ropelab's.
void put_special_ids(const ExportSource& s, nlohmann::json& j);

}  // namespace ropelab::hf
