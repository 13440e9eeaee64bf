// What the decoder families share (hf/llama.cpp: the Llama layout; hf/gemma3.cpp, hf/gpt2.cpp,
// hf/gpt_neox.cpp): the
// checkpoint's tokenizer and special ids on the way in, the run's sizes as overrides, and on the
// way out the sizes, norms, tying and special ids of config.json. The tokenizer: a byte-level BPE
// tokenizer.json (Llama 3, Qwen2), else a SentencePiece tokenizer.model (Llama 2, Mistral), both
// re-numbered through RUN/hf/vocab_order.json; specials the checkpoint lacks take rows past the
// tokenizer's end, then unused special tokens, then (byte-level BPE) the tokens of control bytes
// ordinary text does not contain, then the lowest free ids.
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "config/layout.h"
#include "hf/mapping.h"
#include "tokenizers/bpe.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::hf {

namespace {

// The first id of a config.json token id entry (an int, or a list of them as Llama 3.1's
// eos_token_id), or -1.
int64_t token_id(const Source& s, const char* key) {
  const nlohmann::json* v = s.use(key);
  if (v == nullptr) return -1;
  if (v->is_array() && !v->empty() && (*v)[0].is_number_integer()) return (*v)[0].get<int64_t>();
  if (!v->is_number_integer()) throw UserError(s.config_path() + ": " + key + ": not an id");
  return v->get<int64_t>();
}

}  // namespace

// The checkpoint's tokenizer: a byte-level BPE tokenizer.json (Llama 3, Qwen2), else a
// SentencePiece tokenizer.model (Llama 2, Mistral); the ids its specials have, and the ids that
// can stand for the specials it lacks (rows past the tokenizer's end, then its unused special
// tokens).
LlamaTokenizer tokenizer_of(const Source& s, int64_t V) {
  LlamaTokenizer t;
  const std::string json_file = s.dir() + "/tokenizer.json", spm = s.dir() + "/tokenizer.model";
  bool byte_level = false;
  if (std::filesystem::is_regular_file(json_file)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(fs::read_file(json_file));
    } catch (const nlohmann::json::exception& e) {
      throw UserError(json_file + ": not valid JSON (" + e.what() + ")");
    }
    const nlohmann::json model = j.is_object() ? j.value("model", nlohmann::json()) : nullptr;
    byte_level = model.is_object() && model.value("type", std::string()) == "BPE" &&
                 !model.value("byte_fallback", false);
  }
  const std::string order = s.dir() + "/vocab_order.json";  // written by the import
  if (byte_level) {
    tokenizers::BpeTokenizer bpe(json_file);  // refuses what it cannot run, naming the key
    if (bpe.size() > V)
      throw UserError(fmt::format("{}: {} ids, more than config.json's vocab_size {}", json_file,
                                  bpe.size(), V));
    for (int64_t i = bpe.size(); i < V; ++i) t.fillers.push_back(i);
    std::vector<int64_t> unused;
    for (const auto& a : bpe.added_tokens())
      if (a.special) unused.push_back(a.id);
    std::sort(unused.begin(), unused.end());
    t.fillers.insert(t.fillers.end(), unused.begin(), unused.end());
    // Then the tokens of control bytes ordinary text does not contain: U+0000-U+0008 and
    // U+000E-U+001F (not tab, line feed, vertical tab, form feed, carriage return), in GPT-2's byte
    // alphabet the characters U+0100 + byte. GPT-2's vocabulary has no rows to spare: without these
    // its specials would take the lowest ids, "!", "\"", "#" and the like.
    for (int b = 0; b < 32; ++b) {
      if (b >= 9 && b <= 13) continue;
      const std::string piece = {static_cast<char>(0xC4), static_cast<char>(0x80 + b)};
      if (const int32_t id = bpe.id_of(piece); id >= 0) t.fillers.push_back(id);
    }
    t.overrides = {"data.tokenizer.type=bpe", "data.tokenizer.model=" + json_file,
                   "data.tokenizer.vocab_order=" + order};
  } else if (std::filesystem::is_regular_file(spm)) {
    std::vector<int64_t> identity(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) identity[static_cast<size_t>(i)] = i;
    tokenizers::SpmTokenizer sp(spm, identity);  // refuses a damaged model, naming it
    for (int32_t i = 0; i < std::min<int64_t>(V, 16); ++i)
      if (sp.piece(i) == "<unk>") t.unk = i;
    t.overrides = {"data.tokenizer.type=spm", "data.tokenizer.model=" + spm,
                   "data.tokenizer.vocab_order=" + order};
  } else {
    t.note =
        "no tokenizer.json (byte-level BPE) or tokenizer.model: the run cannot tokenize "
        "text until data.tokenizer names one";
  }
  return t;
}

// The checkpoint's ids for ropelab's specials (pad, unk, bos, eos, cls, sep, mask), from
// config.json and the tokenizer's unknown token. config.json may give one id to several of them
// (Qwen2.5's bos = eos, a pad = eos): the first of eos, bos, pad keeps it (ropelab's LM data
// ends each document with eos), and a later one takes an id no text produces, which `shared`
// reports. bos or eos on the tokenizer's unknown token is refused naming both.
std::array<int64_t, 7> llama_specials(const Source& s, int64_t V, int64_t unk, std::string& shared,
                                      const std::map<std::string, int64_t>& defaults) {
  std::array<int64_t, 7> ids = {-1, unk, -1, -1, -1, -1, -1};
  std::map<int64_t, std::string> owner;
  if (unk >= 0) owner[unk] = "the tokenizer's unknown token";
  const std::pair<const char*, int32_t> keys[] = {{"eos_token_id", tokenizers::Special::kEos},
                                                  {"bos_token_id", tokenizers::Special::kBos},
                                                  {"pad_token_id", tokenizers::Special::kPad}};
  for (const auto& [key, slot] : keys) {
    int64_t id = token_id(s, key);
    if (id < 0 && !s.present(key) && defaults.count(key) != 0) id = defaults.at(key);
    if (id < 0) continue;
    if (id >= V)
      throw UserError(fmt::format("{}: {} = {} is outside the vocabulary (vocab_size {})",
                                  s.config_path(), key, id, V));
    if (id == unk && slot != tokenizers::Special::kPad)
      throw UserError(
          fmt::format("{}: {} = {} is tokenizer.model's unknown token <unk>: a "
                      "sequence boundary cannot be an unknown character",
                      s.config_path(), key, id));
    auto it = owner.find(id);
    if (it == owner.end()) {
      owner[id] = key;
      ids[static_cast<size_t>(slot)] = id;
      continue;
    }
    shared += fmt::format(
        "{}{} shares id {} with {}, as the checkpoint defines them (ropelab's own {} slot takes "
        "an id no text produces)",
        shared.empty() ? "" : "; ", key, id, it->second,
        slot == tokenizers::Special::kBos ? "bos" : "pad");
  }
  return ids;
}

Mapped decoder_vocabulary(const Source& s, int64_t V,
                          const std::map<std::string, int64_t>& defaults) {
  Mapped m;
  m.vocab = V;
  auto tok = tokenizer_of(s, V);
  std::string shared;
  m.vocab_order = tokenizers::special_first_order(
      V, llama_specials(s, V, tok.unk, shared, defaults), tok.fillers);
  m.overrides = tok.overrides;
  m.note = tok.note;
  if (!shared.empty()) m.note += (m.note.empty() ? "" : "; ") + shared;
  return m;
}

config::Activation plain_activation(const Source& s, const std::string& key,
                                    const std::string& fallback) {
  const std::string name = s.get_string(key, fallback);
  if (name == "gelu") return config::Activation::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return config::Activation::kGeluTanh;
  if (name == "relu") return config::Activation::kRelu;
  s.unsupported(key,
                "ropelab has gelu (erf), its tanh form (gelu_new, gelu_pytorch_tanh, "
                "gelu_fast) and relu");
}

nlohmann::json hf_activation(config::Activation a, const nlohmann::json& origin,
                             const std::string& key) {
  const nlohmann::json own = origin.is_object() ? origin.value(key, nlohmann::json()) : nullptr;
  if (a == config::Activation::kGeluTanh) {
    const bool tanh_form = own == "gelu_new" || own == "gelu_pytorch_tanh" || own == "gelu_fast";
    return tanh_form ? own : nlohmann::json("gelu_new");
  }
  return a == config::Activation::kGelu ? "gelu" : "relu";
}

std::string gpt_style_mismatch(const config::Config& c, const std::string& family) {
  const auto& m = c.model;
  using namespace config;
  if (m.arch != Arch::kDecoder) return "the model is not a decoder";
  if (!std::holds_alternative<ClmTaskConfig>(c.task.opts))
    return std::string("task ") + c.task.type() + " has no such class";
  if (m.norm != Norm::kPre && m.norm != Norm::kAuto)
    return std::string(to_string(m.norm)) + " layers (" + family + "'s are pre-norm)";
  if (m.norm_type != NormType::kLayerNorm) return "norms other than LayerNorm";
  if (is_gated(m.activation)) return "a gated feed-forward";
  if (m.bias != LinearBias::kAll) return "projections without biases (model.bias)";
  if (m.n_kv_heads != 0 && m.n_kv_heads != m.n_heads) return "grouped-query attention";
  if (m.head_dim != 0 && m.head_dim * m.n_heads != m.d_model)
    return "a head width other than d_model / n_heads (model.head_dim)";
  if (m.attention.qk_norm) return "QK-norm";
  if (m.attention.kernel != AttentionKernel::kSoftmax) return "linear attention";
  if (m.scale_embeddings) return "scaled embeddings";
  if (!m.layout.kinds.empty()) return "a hybrid layout (model.layout)";
  return "";
}

void take_layer_norm(Source& s, const std::string& from, const std::string& to, int64_t D,
                     std::map<std::string, at::Tensor>& w) {
  w[to + ".weight"] = s.take(from + ".weight", {D});
  w[to + ".bias"] = s.take(from + ".bias", {D});
}

std::vector<std::string> decoder_overrides(int64_t P, int64_t D, int64_t L, int64_t N, int64_t Nkv,
                                           int64_t H, double dropout) {
  return {
      "task.type=clm",
      // The trained context (what --rope-scaling extends); one sequence a batch at that length.
      "task.seq_len=" + std::to_string(P),
      "train.batch_size=1",
      "model.arch=decoder",
      "model.d_model=" + std::to_string(D),
      "model.n_layers=" + std::to_string(L),
      "model.n_heads=" + std::to_string(N),
      "model.n_kv_heads=" + std::to_string(Nkv),
      // 0: d_model / n_heads, the model of a checkpoint without its own head width
      "model.head_dim=" + std::to_string(H * N == D ? 0 : H),
      "model.dropout=" + exact_number(dropout),
  };
}

void put_decoder_keys(const ExportSource& s, nlohmann::json& j) {
  const auto& c = *s.config;
  const auto& m = c.model;
  j["vocab_size"] = s.order.size();
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.d_ff;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads;
  j["head_dim"] = config::head_dim_of(m);
  j["max_position_embeddings"] = c.task.seq_len;
  j["rms_norm_eps"] = m.norm_eps;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["attention_dropout"] = m.attention.dropout;
  j["initializer_range"] = m.init_std;
  put_special_ids(s, j);
  j[s.form == HfConfigForm::kV4 ? "torch_dtype" : "dtype"] = "float32";
}

void put_layer_norm(const ExportSource& s, const std::string& from, const std::string& to,
                    Exported& e) {
  for (const char* p : {".weight", ".bias"}) e.tensors.emplace_back(to + p, s.at(from + p));
}

void put_special_ids(const ExportSource& s, nlohmann::json& j) {
  const std::pair<const char*, int32_t> specials[] = {{"bos_token_id", tokenizers::Special::kBos},
                                                      {"eos_token_id", tokenizers::Special::kEos},
                                                      {"pad_token_id", tokenizers::Special::kPad}};
  for (const auto& [key, slot] : specials)
    j[key] = s.origin.is_object() && s.origin.contains(key) ? s.origin[key]
                                                            : nlohmann::json(s.order[slot]);
}

std::vector<std::string> under_kind(const std::vector<std::string>& rope, const std::string& kind) {
  const std::string from = "model.position.", to = "model.layout.kinds." + kind + ".position.";
  std::vector<std::string> out = {to + "type=rope", to + "pairing=half"};
  for (const auto& o : rope) out.push_back(to + o.substr(from.size()));
  return out;
}

}  // namespace ropelab::hf
