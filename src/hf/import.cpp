#include "hf/import.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "config/loader.h"
#include "data/prepare.h"
#include "hf/family.h"
#include "hf/mapping.h"
#include "run/run.h"
#include "tasks/task.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/checkpoint.h"
#include "weights/weights.h"

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

std::string exact_number(double v) { return fmt::format("{:.17g}", v); }

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
  used_keys_.insert("architectures");
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

const nlohmann::json* Source::use(const std::string& key) const {
  used_keys_.insert(key);
  auto it = config_.find(key);
  return it == config_.end() || it->is_null() ? nullptr : &*it;
}

bool Source::present(const std::string& key) const {
  auto it = config_.find(key);
  return it != config_.end() && !it->is_null();
}

int64_t Source::get_int(const std::string& key) const {
  const auto* v = use(key);
  if (v == nullptr) throw UserError(config_path() + ": " + key + ": missing");
  if (!v->is_number_integer()) throw UserError(config_path() + ": " + key + ": not an integer");
  return v->get<int64_t>();
}

int64_t Source::get_int(const std::string& key, int64_t fallback) const {
  return use(key) == nullptr ? fallback : get_int(key);
}

double Source::get_double(const std::string& key, double fallback) const {
  const auto* v = use(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) throw UserError(config_path() + ": " + key + ": not a number");
  return v->get<double>();
}

bool Source::get_bool(const std::string& key, bool fallback) const {
  const auto* v = use(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw UserError(config_path() + ": " + key + ": not true or false");
  return v->get<bool>();
}

std::string Source::get_string(const std::string& key, const std::string& fallback) const {
  const auto* v = use(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) throw UserError(config_path() + ": " + key + ": not a string");
  return v->get<std::string>();
}

void Source::unsupported(const std::string& key, const std::string& why) const {
  const auto* v = use(key);
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

// ---- reading

namespace {

// A classifier's rows (the checkpoint's labels `labels`, by id) put in the order of the run's
// data's labels: by name where id2label names them all, else in id order (said in the
// returned note). UserError when the numbers of labels, or regression and classes, differ.
std::string align_labels(Imported& imp, const std::vector<std::string>& labels,
                         const std::string& config_path) {
  const auto& c = imp.config;
  const corpora::GlueTask g = run::plan_of(c).glue;
  const std::string data =
      config::to_string(c.data.source) + (g.name.empty() ? std::string() : " (" + g.name + ")");
  if (g.regression != labels.empty())
    throw UserError(fmt::format("{}: id2label: {} but the data {} is {}", config_path,
                                labels.empty() ? "a regression head (one output)"
                                               : std::to_string(labels.size()) + " labels",
                                data, g.regression ? "regression" : "classification"));
  if (g.regression) return "";
  if (labels.size() != g.label_names.size())
    throw UserError(fmt::format("{}: id2label has {} labels but the data {} has {}", config_path,
                                labels.size(), data, g.label_names.size()));
  std::vector<int64_t> rows;
  for (const auto& name : g.label_names) {
    auto it = std::find(labels.begin(), labels.end(), name);
    if (it == labels.end()) break;
    rows.push_back(it - labels.begin());
  }
  std::string joined;
  for (const auto& l : labels) joined += (joined.empty() ? "" : ", ") + l;
  if (rows.size() != labels.size())
    return "id2label (" + joined + ") does not name the data's labels: taken in id order";
  auto index = torch::tensor(rows, torch::kLong);
  for (const char* k : {"head.classifier.weight", "head.classifier.bias"})
    imp.weights[k] = imp.weights.at(k).index_select(0, index);
  return "";
}

}  // namespace

namespace {
// A class no family takes: what it has that ropelab lacks, where known, else the list.
[[noreturn]] void refuse_architecture(const Source& s) {
  for (const Family* f : families())
    if (f->refuse != nullptr) f->refuse(s);
  const std::string& a = s.architecture();
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
    if (s.present(key))
      s.unsupported(key, a + " has mixture-of-experts layers, which ropelab does not have");
  throw UserError(s.config_path() + ": architectures: " + a +
                  " is not supported (supported: " + supported_classes() + ")");
}
}  // namespace

Imported read_hf(const std::string& dir, const std::vector<std::string>& overrides,
                 bool allow_unknown_keys) {
  if (!stdfs::is_directory(dir))
    throw UserError(dir +
                    ": no such directory (a Hugging Face checkpoint: config.json, "
                    "model.safetensors and the tokenizer's files)");
  Source s(dir);
  const Family* family = family_of(s.architecture());
  if (family == nullptr) refuse_architecture(s);
  Mapped m = family->map(s);
  auto ignored = check_config_keys(s, allow_unknown_keys);
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
  imp.ignored_keys = std::move(ignored);
  const bool data_named = std::any_of(overrides.begin(), overrides.end(), [](const auto& o) {
    return o.rfind("data.source=", 0) == 0;
  });
  if (m.classifier && !data_named)
    throw UserError(s.config_path() + ": " + s.architecture() +
                    " needs the data its labels are for; HINT: add e.g. data.source=glue "
                    "data.glue_task=SST-2 data.train=GLUE/SST-2 (or data.source=bible-sst2)");
  // The config: ropelab's defaults under the mapping's overrides, then the user's, with every
  // config check.
  std::vector<config::Override> ov;
  for (const auto& o : m.overrides) ov.push_back(config::Override{o, s.config_path()});
  for (const auto& o : config::overrides_from_args(overrides)) ov.push_back(o);
  imp.config = config::load_overrides(ov);
  imp.note = m.note;
  if (m.classifier) imp.note = align_labels(imp, m.labels, s.config_path());
  return imp;
}

// ---- writing the run

std::string import_hf(const std::string& dir, const std::string& out,
                      const std::vector<std::string>& overrides, bool allow_unknown_keys) {
  if (stdfs::exists(out)) throw UserError(out + ": already exists; choose another --out");
  Imported imp = read_hf(dir, overrides, allow_unknown_keys);
  // The run names itself, and its tokenizer reads the copy of the vocabulary it keeps.
  stdfs::path out_abs = stdfs::absolute(out).lexically_normal();
  if (out_abs.filename().empty()) out_abs = out_abs.parent_path();  // "runs/bert/"
  imp.config.run.name = out_abs.filename().string();
  imp.config.run.out_dir = out_abs.parent_path().string();
  auto& tok = imp.config.data.tokenizer;
  // The checkpoint's own tokenizer file is copied into RUN/hf; one the user names elsewhere
  // (data.tokenizer.model=...) stays where it is.
  const auto in_checkpoint = [&](const std::string& p) {
    return stdfs::absolute(p).lexically_normal().parent_path() ==
           (stdfs::absolute(dir) / "f").lexically_normal().parent_path();  // "dir/" too
  };
  if (!tok.model.empty() && in_checkpoint(tok.model))
    tok.model = (out_abs / "hf" / stdfs::path(tok.model).filename()).string();
  if (!tok.vocab_order.empty()) tok.vocab_order = (out_abs / "hf" / "vocab_order.json").string();
  // Every parameter of the run's model: from the checkpoint, or initialised (listed).
  auto model = tasks::make_task(imp.config, imp.vocab)->build_model();
  {
    torch::NoGradGuard ng;
    auto params = weights::state_dict(*model);
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
  weights::TrainState st;
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
    weights::save_checkpoint(tmp, *model, nullptr, st, 1);
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
  if (!imp.note.empty()) summary += "; " + imp.note;
  if (!imp.unused.empty())
    summary += fmt::format("; {} checkpoint tensor(s) not used, e.g. {}", imp.unused.size(),
                           imp.unused.front());
  if (!imp.ignored_keys.empty()) {
    std::string keys;
    for (const auto& k : imp.ignored_keys) keys += (keys.empty() ? "" : ", ") + k;
    summary += fmt::format("; {} config.json key(s) ignored (--allow-unknown-keys): {}",
                           imp.ignored_keys.size(), keys);
  }
  return summary;
}

}  // namespace ropelab::hf
