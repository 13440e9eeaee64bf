#include "hf/import.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "config/loader.h"
#include "eval/weights.h"
#include "hf/mapping.h"
#include "tasks/task.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::hf {

namespace stdfs = std::filesystem;

namespace {

at::ScalarType torch_dtype(DType d, const std::string& what) {
  switch (d) {
    case DType::kF64:
      return torch::kFloat64;
    case DType::kF32:
      return torch::kFloat32;
    case DType::kF16:
      return torch::kFloat16;
    case DType::kBF16:
      return torch::kBFloat16;
    default:
      throw UserError(what + ": dtype " + to_string(d) +
                      " is not a weight dtype (F64, F32, F16 or BF16 expected)");
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The files of a checkpoint directory that the run keeps under hf/ (for the tokenizer and for
// export): configuration and tokenizer files, never weights.
const char* const kKeptFiles[] = {"config.json",
                                  "generation_config.json",
                                  "tokenizer.json",
                                  "tokenizer_config.json",
                                  "special_tokens_map.json",
                                  "vocab.txt",
                                  "tokenizer.model",
                                  "merges.txt",
                                  "vocab.json",
                                  "added_tokens.json"};

}  // namespace

// ---- Source

Source::Source(const std::string& dir) : dir_(dir), ckpt_(Checkpoint::open(dir)) {
  const std::string cfg = config_path();
  if (!stdfs::is_regular_file(cfg))
    throw UserError(cfg + ": no such file (a Hugging Face checkpoint directory has config.json)");
  try {
    config_ = nlohmann::json::parse(fs::read_file(cfg));
  } catch (const nlohmann::json::exception& e) {
    throw UserError(cfg + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!config_.is_object()) throw UserError(cfg + ": not a JSON object");
  auto a = config_.find("architectures");
  if (a == config_.end() || !a->is_array() || a->empty() || !(*a)[0].is_string())
    throw UserError(cfg +
                    ": architectures: missing (a list naming the model class, e.g. "
                    "[\"BertForMaskedLM\"])");
  architecture_ = (*a)[0].get<std::string>();
  for (const auto& n : ckpt_.names()) {
    std::string modern = n;
    for (auto [from, to] : {std::pair{"LayerNorm.gamma", "LayerNorm.weight"},
                            std::pair{"LayerNorm.beta", "LayerNorm.bias"}}) {
      auto at = modern.rfind(from);
      if (at != std::string::npos && at + std::strlen(from) == modern.size())
        modern = modern.substr(0, at) + to;
    }
    if (renamed_.count(modern) != 0)
      throw UserError(ckpt_.path() + ": holds both " + renamed_[modern] + " and " + n);
    renamed_[modern] = n;
  }
}

std::string Source::config_path() const { return (stdfs::path(dir_) / "config.json").string(); }

namespace {
const nlohmann::json* find_key(const nlohmann::json& j, const std::string& key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}
}  // namespace

int64_t Source::get_int(const std::string& key) const {
  const auto* v = find_key(config_, key);
  if (v == nullptr) throw UserError(config_path() + ": " + key + ": missing");
  if (!v->is_number_integer()) throw UserError(config_path() + ": " + key + ": not an integer");
  return v->get<int64_t>();
}

int64_t Source::get_int(const std::string& key, int64_t fallback) const {
  return find_key(config_, key) == nullptr ? fallback : get_int(key);
}

double Source::get_double(const std::string& key, double fallback) const {
  const auto* v = find_key(config_, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) throw UserError(config_path() + ": " + key + ": not a number");
  return v->get<double>();
}

bool Source::get_bool(const std::string& key, bool fallback) const {
  const auto* v = find_key(config_, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw UserError(config_path() + ": " + key + ": not true or false");
  return v->get<bool>();
}

std::string Source::get_string(const std::string& key, const std::string& fallback) const {
  const auto* v = find_key(config_, key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) throw UserError(config_path() + ": " + key + ": not a string");
  return v->get<std::string>();
}

void Source::unsupported(const std::string& key, const std::string& why) const {
  const auto* v = find_key(config_, key);
  throw UserError(config_path() + ": " + key + " = " + (v ? v->dump() : std::string("null")) +
                  " is not supported: " + why);
}

std::string Source::file_name(const std::string& name) const {
  auto it = renamed_.find(name);
  return it == renamed_.end() ? std::string() : it->second;
}

bool Source::has(const std::string& name) const { return renamed_.count(name) != 0; }

at::Tensor Source::take(const std::string& name, const std::vector<int64_t>& shape) {
  const std::string f = file_name(name);
  if (f.empty())
    throw UserError(ckpt_.path() + ": " + name + ": missing (needed for " + architecture_ + ")");
  const TensorView& v = ckpt_.get(f);
  const std::string what = ckpt_.path() + ": " + f;
  if (v.shape != shape)
    throw UserError(what + ": shape " + shape_str(v.shape) + ", config.json implies " +
                    shape_str(shape));
  auto t = torch::empty(v.shape, torch::TensorOptions().dtype(torch_dtype(v.dtype, what)));
  if (v.bytes > 0) std::memcpy(t.data_ptr(), v.data, v.bytes);
  used_.insert(name);
  return t.to(torch::kFloat32);
}

void Source::skip(const std::string& name) {
  if (!has(name)) return;
  used_.insert(name);
  skipped_.push_back(file_name(name));
}

std::vector<std::string> Source::names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : renamed_) out.push_back(n);
  return out;
}

std::vector<std::string> Source::left_over() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : renamed_)
    if (used_.count(n) == 0) out.push_back(f);
  return out;
}

std::vector<std::string> read_vocab_txt(const std::string& path) {
  if (!stdfs::is_regular_file(path))
    throw UserError(path + ": no such file (the checkpoint's WordPiece vocabulary)");
  std::vector<std::string> tokens;
  std::string text = fs::read_file(path), line;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    line = text.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(line);
    at = nl + 1;
  }
  return tokens;
}

// ---- the vocabulary's order

std::vector<int64_t> special_first_order(int64_t vocab, std::array<int64_t, 7> specials) {
  std::vector<bool> taken(static_cast<size_t>(vocab), false);
  for (auto s : specials) {
    if (s < -1 || s >= vocab)
      throw UserError(fmt::format("special token id {} is outside the vocabulary of {}", s, vocab));
    if (s >= 0) {
      if (taken[static_cast<size_t>(s)])
        throw UserError(fmt::format("special token id {} names two special tokens", s));
      taken[static_cast<size_t>(s)] = true;
    }
  }
  int64_t next_free = 0;
  for (auto& s : specials) {
    if (s >= 0) continue;
    while (next_free < vocab && taken[static_cast<size_t>(next_free)]) ++next_free;
    if (next_free == vocab) throw UserError("the vocabulary is too small for ropelab's specials");
    s = next_free;
    taken[static_cast<size_t>(next_free)] = true;
  }
  std::vector<int64_t> order(specials.begin(), specials.end());
  for (int64_t i = 0; i < vocab; ++i)
    if (!taken[static_cast<size_t>(i)]) order.push_back(i);
  return order;
}

// ---- reading

Imported read_hf(const std::string& dir) {
  if (!stdfs::is_directory(dir))
    throw UserError(dir +
                    ": no such directory (a Hugging Face checkpoint: config.json, "
                    "model.safetensors and the tokenizer's files)");
  Source s(dir);
  Mapped m;
  if (is_bert(s.architecture()))
    m = map_bert(s);
  else if (is_roformer(s.architecture()))
    m = map_roformer(s);
  else
    throw UserError(s.config_path() + ": architectures: " + s.architecture() +
                    " is not supported (supported: BertModel, BertForMaskedLM, RoFormerModel, "
                    "RoFormerForMaskedLM)");
  auto left = s.left_over();
  if (!left.empty())
    throw UserError(fmt::format("{}: {} tensor(s) that {} does not have, e.g. {}", dir, left.size(),
                                s.architecture(), left.front()));
  Imported imp;
  imp.architecture = s.architecture();
  imp.vocab = m.vocab;
  imp.vocab_order = m.vocab_order;
  imp.weights = std::move(m.weights);
  imp.unused = s.skipped();
  // The config: ropelab's defaults under the mapping's overrides, with every config check.
  std::vector<config::Override> ov;
  for (const auto& o : m.overrides) ov.push_back(config::Override{o, s.config_path()});
  auto base = stdfs::temp_directory_path() / fmt::format("ropelab-{}-import.yaml", ::getpid());
  fs::write_file_atomic(base.string(), "{}\n");
  try {
    imp.config = config::load_config(base.string(), ov);
  } catch (...) {
    stdfs::remove(base);
    throw;
  }
  stdfs::remove(base);
  return imp;
}

// ---- writing the run

std::string import_hf(const std::string& dir, const std::string& out) {
  if (stdfs::exists(out)) throw UserError(out + ": already exists; choose another --out");
  Imported imp = read_hf(dir);
  // Every parameter of the run's model: from the checkpoint, or initialised (listed).
  auto model = tasks::make_task(imp.config, imp.vocab)->build_model();
  {
    torch::NoGradGuard ng;
    auto params = eval::state_dict(*model);
    for (auto& [name, t] : params) {
      auto it = imp.weights.find(name);
      if (it == imp.weights.end()) {
        imp.initialised.push_back(name);
        continue;
      }
      if (it->second.sizes() != t.sizes())
        throw std::logic_error("hf import: " + name + " mapped with shape " +
                               shape_str(it->second.sizes().vec()) + ", the model has " +
                               shape_str(t.sizes().vec()));
      t.copy_(it->second);
    }
    for (const auto& [name, t] : imp.weights)
      if (params.count(name) == 0)
        throw std::logic_error("hf import: mapped " + name + ", which the model does not have");
  }
  train::TrainState st;
  st.vocab = imp.vocab;
  st.threads = 1;

  nlohmann::json order = imp.vocab_order;
  std::string tmp = out + ".tmp";
  std::error_code ec;
  stdfs::remove_all(tmp, ec);
  try {
    fs::make_dirs((stdfs::path(tmp) / "hf").string());
    for (const char* f : kKeptFiles) {
      auto from = stdfs::path(dir) / f;
      if (stdfs::is_regular_file(from))
        fs::write_file_atomic((stdfs::path(tmp) / "hf" / f).string(), fs::read_file(from));
    }
    fs::write_file_atomic((stdfs::path(tmp) / "hf" / "vocab_order.json").string(),
                          order.dump() + "\n");
    fs::write_file_atomic((stdfs::path(tmp) / "config.yaml").string(), config::dump(imp.config));
    train::save_checkpoint(tmp, *model, nullptr, st, 1);
    stdfs::rename(tmp, out);
  } catch (...) {
    stdfs::remove_all(tmp, ec);
    throw;
  }
  std::string summary = fmt::format("imported {} ({} tensors, vocabulary {}) from {} into {}",
                                    imp.architecture, imp.weights.size(), imp.vocab, dir, out);
  if (!imp.initialised.empty())
    summary += fmt::format("; {} parameter(s) not in the checkpoint were initialised, e.g. {}",
                           imp.initialised.size(), imp.initialised.front());
  if (!imp.unused.empty())
    summary += fmt::format("; {} checkpoint tensor(s) not used, e.g. {}", imp.unused.size(),
                           imp.unused.front());
  return summary;
}

}  // namespace ropelab::hf
