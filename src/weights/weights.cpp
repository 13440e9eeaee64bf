#include "weights/weights.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "config/loader.h"
#include "data/prepare.h"
#include "tasks/task.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"
#include "weights/checkpoint.h"

namespace ropelab::weights {

namespace stdfs = std::filesystem;

StateDict state_dict(torch::nn::Module& m) {
  StateDict sd;
  for (const auto& p : m.named_parameters()) sd[p.key()] = p.value();
  for (const auto& b : m.named_buffers()) sd[b.key()] = b.value();
  return sd;
}

RunModel load_run_model(const std::string& source, bool best,
                        const std::vector<std::string>& overrides) {
  stdfs::path src(source);
  RunModel r;
  if (stdfs::exists(src / "MANIFEST.json")) {
    r.checkpoint = src.string();
    r.run_dir = src.parent_path().parent_path().string();
  } else if (stdfs::exists(src / "config.yaml")) {
    r.run_dir = src.string();
  } else {
    throw UserError(source +
                    ": neither a run directory (config.yaml) nor a checkpoint (MANIFEST.json)");
  }
  std::vector<config::Override> ov;
  for (const auto& o : overrides) ov.push_back(config::Override{o, "evaluation"});
  r.config = config::load_config((stdfs::path(r.run_dir) / "config.yaml").string(), ov);
  // A trained run is used whole in each process: context parallelism was training's.
  r.config.train.context_parallel = 1;
  if (r.checkpoint.empty()) {
    auto latest = weights::latest_checkpoint(r.run_dir);
    if (!latest) throw UserError(r.run_dir + ": the run has no checkpoint");
    r.checkpoint = *latest;
  }
  auto state =
      nlohmann::json::parse(fs::read_file((stdfs::path(r.checkpoint) / "state.json").string()));
  r.vocab = state.value("vocab", 0);
  if (r.vocab <= 0) throw UserError(r.checkpoint + ": state.json lacks the vocabulary size");
  r.source_vocab = state.value("source_vocab", 0);
  r.model = tasks::make_task(r.config, r.vocab, nullptr, r.source_vocab)->build_model();
  weights::TrainState st = weights::load_checkpoint(r.checkpoint, *r.model, nullptr);
  if (best && st.best_step >= 0 && st.best_step != st.step) {
    if (auto b = weights::checkpoint_for_step(r.run_dir, st.best_step)) {
      r.checkpoint = *b;
      st = weights::load_checkpoint(r.checkpoint, *r.model, nullptr);
    }
  }
  r.step = st.step;
  return r;
}

namespace {
bool is_weights_file(const std::string& path) {
  return stdfs::is_regular_file(path) && h5::looks_like_hdf5(path);
}

StateDict read_weights_h5(const std::string& path) {
  auto f = h5::open_file(path, false);
  if (!h5::has_attr(f.id(), "format") ||
      h5::get_attr_str(f.id(), "format", path) != "ropelab.weights")
    throw UserError(path + ": not a ropelab weights file (format attribute missing)");
  StateDict sd;
  for (const auto& p : h5::dataset_paths(f.id())) {
    auto shape = h5::dataset_shape(f.id(), p, path);
    auto v = h5::read_f32_flat(f.id(), p, path);
    std::string name = p;
    std::replace(name.begin(), name.end(), '/', '.');
    sd[name] = torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kFloat32)
                   .clone()
                   .reshape(shape);
  }
  return sd;
}

std::string shape_str(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}
}  // namespace

StateDict read_weights(const std::string& source) {
  if (is_weights_file(source)) return read_weights_h5(source);
  auto r = load_run_model(source);
  return state_dict(*r.model);
}

Pretrained read_pretrained(const std::string& source) {
  Pretrained p;
  if (is_weights_file(source)) {
    std::string yaml;
    {
      auto f = h5::open_file(source, false);
      if (!h5::has_attr(f.id(), "config"))
        throw UserError(source + ": not a ropelab weights file (no config attribute)");
      yaml = h5::get_attr_str(f.id(), "config", source);
      p.vocab = h5::get_attr_int(f.id(), "vocab_size", source);
    }
    // The loader reads files (for line numbers in errors): give it the embedded config as one.
    auto tmp = stdfs::temp_directory_path() / fmt::format("ropelab-{}-pretrained.yaml", ::getpid());
    fs::write_file_atomic(tmp.string(), yaml);
    try {
      p.config = config::load_config(tmp.string());
    } catch (...) {
      stdfs::remove(tmp);
      throw;
    }
    stdfs::remove(tmp);
    p.weights = read_weights_h5(source);
    return p;
  }
  auto r = load_run_model(source, /*best=*/true);
  p.config = r.config;
  p.vocab = r.vocab;
  p.checkpoint = r.checkpoint;
  p.step = r.step;
  p.weights = state_dict(*r.model);
  return p;
}

void use_pretrained_tokenizer(config::Config& c, const Pretrained& p) {
  auto& t = c.data.tokenizer;
  if (!t.model.empty() || c.task.init_from.empty()) return;
  const auto& pt = p.config.data.tokenizer;
  if (pt.type == config::TokenizerType::kWordPiece || pt.type == config::TokenizerType::kBpe ||
      !pt.vocab_order.empty()) {  // an imported checkpoint's tokenizer
    t = pt;
    if (!fs::exists(t.model))
      throw UserError(c.task.init_from + ": its tokenizer " + t.model +
                      " is missing; HINT: set data.tokenizer.model to the checkpoint's tokenizer "
                      "file");
    return;
  }
  if (pt.type != config::TokenizerType::kSpm) {  // byte or synthetic: nothing to carry over
    t.type = pt.type;
    return;
  }
  t.type = config::TokenizerType::kSpm;
  t.model =
      pt.model.empty() ? data::plan(p.config.data, p.config.task.seq_len).tokenizer_path : pt.model;
  if (!fs::exists(t.model))
    throw UserError(c.task.init_from + ": its tokenizer " + t.model +
                    " is missing; HINT: run `ropelab prepare` on the pretraining config, or set "
                    "data.tokenizer.model");
}

bool is_position_key(const std::string& key) {
  return key.rfind("model.position.", 0) == 0 || key.rfind("model.layout.", 0) == 0;
}

namespace {
// The backbone tensors a model of `c` has that `p` lacks or holds in another shape, as
// "name [shape]" (a throwaway model on the CPU; only built when the positions changed).
std::vector<std::string> new_backbone_tensors(const config::Config& c, const Pretrained& p) {
  torch::NoGradGuard ng;
  auto m = tasks::make_task(c, p.vocab)->build_model();
  std::vector<std::string> out;
  for (const auto& [name, t] : state_dict(*m)) {
    if (name.rfind("backbone.", 0) != 0) continue;
    auto it = p.weights.find(name);
    if (it == p.weights.end() || !it->second.sizes().equals(t.sizes()))
      out.push_back(name + " " + shape_str(t));
  }
  return out;
}

std::string joined_changes(const std::vector<PositionChange>& changes) {
  std::string s;
  for (const auto& ch : changes)
    s += fmt::format("{}{}: {} (pretrained) vs {}", s.empty() ? "" : "; ", ch.key, ch.before,
                     ch.after);
  return s;
}
}  // namespace

std::vector<PositionChange> check_pretrained_architecture(const config::Config& c,
                                                          const Pretrained& p) {
  auto ours = config::flat_keys(c), theirs = config::flat_keys(p.config);
  auto compared = [](const std::string& k) {
    return k.rfind("model.", 0) == 0 && k.find("dropout") == std::string::npos &&
           k != "model.init_std";
  };
  std::vector<PositionChange> others, changes;
  for (const auto& [k, v] : ours) {
    if (!compared(k)) continue;
    auto it = theirs.find(k);
    std::string before = it == theirs.end() ? "(absent)" : it->second;
    if (before != v) (is_position_key(k) ? changes : others).push_back({k, before, v});
  }
  for (const auto& [k, v] : theirs)  // keys that only the pretrained run has (DroPE: its base)
    if (compared(k) && is_position_key(k) && ours.count(k) == 0)
      changes.push_back({k, v, "(absent)"});
  std::sort(changes.begin(), changes.end(),
            [](const auto& a, const auto& b) { return a.key < b.key; });
  if (!others.empty())
    throw UserError(c.task.init_from + ": the pretrained model differs from this config (" +
                    joined_changes(others) +
                    "); HINT: use the pretraining config's model section (a change of "
                    "model.position or model.layout alone is allowed)");
  if (changes.empty()) return changes;
  auto added = new_backbone_tensors(c, p);
  if (!added.empty()) {
    std::string list;
    for (const auto& a : added) list += (list.empty() ? "" : ", ") + a;
    // The keys both sides have say what changed (a new family's own keys are noise).
    std::vector<PositionChange> shown;
    for (const auto& ch : changes)
      if (ch.before != "(absent)" && ch.after != "(absent)") shown.push_back(ch);
    throw UserError(c.task.init_from + ": the position change (" +
                    joined_changes(shown.empty() ? changes : shown) +
                    ") adds parameters the pretrained model lacks (" + list +
                    "); only changes that add none may start from a trained model (the base, "
                    "the scaling, the rotary width, NoPE layers, layout kinds, windows, chunks, "
                    "temperatures, no positions)");
  }
  return changes;
}

namespace {
// "model.position.scaling.factor" -> "scaling.factor"; layout keys keep "layout.".
std::string short_key(const std::string& k) {
  const std::string pos = "model.position.";
  if (k.rfind(pos, 0) == 0) return k.substr(pos.size());
  return k.substr(std::string("model.").size());
}
}  // namespace

std::string describe_changes(const std::vector<PositionChange>& changes) {
  // A scaling method in its usual words ("yarn x4"), the rest as "key before -> after".
  std::map<std::string, const PositionChange*> by_key;
  for (const auto& ch : changes) by_key[ch.key] = &ch;
  std::vector<std::string> parts;
  std::set<std::string> done;
  for (const auto& ch : changes) {
    const auto pos = ch.key.rfind(".scaling.type");
    if (pos == std::string::npos || pos + 13 != ch.key.size()) continue;
    const std::string base = ch.key.substr(0, pos + 9);  // "...scaling."
    done.insert(ch.key);
    if (ch.after == "(absent)") continue;  // the family no longer rotates (DroPE)
    std::string words = ch.after == "none" ? "no scaling" : ch.after;
    auto f = by_key.find(base + "factor");
    if (f != by_key.end() && f->second->after != "(absent)") {
      words += " x" + f->second->after;
      done.insert(f->first);
    }
    const std::string prefix = short_key(base);
    if (prefix != "scaling.") words = prefix.substr(0, prefix.size() - 1) + " " + words;
    parts.push_back(words);
  }
  for (const auto& ch : changes) {
    if (done.count(ch.key) || ch.after == "(absent)") continue;
    // A new family's or method's own keys (its defaults among them) are in init_from.json.
    if (ch.before == "(absent)") continue;
    parts.push_back(fmt::format("{} {} -> {}", short_key(ch.key), ch.before, ch.after));
  }
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s;
}

KeyReport init_from_pretrained(model::ModelImpl& m, const config::Config& c, int64_t vocab,
                               const Pretrained& p) {
  if (p.vocab != vocab)
    throw UserError(fmt::format(
        "{}: the pretrained vocabulary has {} entries but this run's tokenizer has {}; HINT: "
        "leave data.tokenizer.model unset to use the pretraining tokenizer",
        c.task.init_from, p.vocab, vocab));
  return load_backbone(m, p.weights, c.task.init_from);
}

std::string KeyReport::str() const {
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& k : v) s += (s.empty() ? "" : ", ") + k;
    return s.empty() ? std::string("none") : s;
  };
  return fmt::format(
      "loaded {} tensors\nmissing (left as initialised): {}\nunexpected (ignored): {}",
      loaded.size(), list(missing), list(unexpected));
}

KeyReport load_backbone(model::ModelImpl& target, const StateDict& source,
                        const std::string& source_name) {
  const std::string prefix = "backbone.";
  KeyReport r;
  auto dst = state_dict(target);
  torch::NoGradGuard ng;
  for (auto& [name, t] : dst) {
    auto it = source.find(name);
    if (name.rfind(prefix, 0) != 0 || it == source.end()) {
      r.missing.push_back(name);
      continue;
    }
    if (!it->second.sizes().equals(t.sizes()))
      throw UserError(
          fmt::format("{}: {} has shape {} but the model expects {}; the pretrained "
                      "backbone has another architecture (width, layers, position "
                      "module or vocabulary)",
                      source_name, name, shape_str(it->second), shape_str(t)));
    t.copy_(it->second);
    r.loaded.push_back(name);
  }
  for (const auto& [name, t] : source) {
    (void)t;
    if (name.rfind(prefix, 0) != 0 || dst.count(name) == 0) r.unexpected.push_back(name);
  }
  return r;
}

}  // namespace ropelab::weights
