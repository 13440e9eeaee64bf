#include "hf/export.h"

#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <filesystem>

#include "config/loader.h"
#include "data/prepare.h"
#include "hf/family.h"
#include "hf/mapping.h"
#include "hf/safetensors.h"
#include "run/run.h"
#include "tokenizers/vocab_order.h"
#include "tokenizers/wordpiece.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/weights.h"

namespace ropelab::hf {

namespace stdfs = std::filesystem;

at::Tensor ExportSource::rows(const at::Tensor& t) const {
  // Row r holds ropelab id r = checkpoint id order[r]: scatter the rows back.
  auto out = torch::empty_like(t);
  out.index_copy_(0, torch::tensor(order, torch::kLong), t);
  return out;
}

const at::Tensor& ExportSource::at(const std::string& name) const {
  auto it = weights.find(name);
  if (it == weights.end()) throw std::logic_error("hf export: the model has no " + name);
  return it->second;
}

namespace {

// The tokenizer's files for the export directory (name -> bytes), or why there are none.
std::map<std::string, std::string> tokenizer_files(const config::Config& c, const data::Plan& plan,
                                                   const std::string& run, const std::string& cls,
                                                   std::string& note) {
  const auto& t = c.data.tokenizer;
  std::map<std::string, std::string> files;
  const auto hf = stdfs::path(run) / "hf";
  auto keep = [&](const char* name) {  // an imported checkpoint's own tokenizer settings
    if (stdfs::is_regular_file(hf / name)) files[name] = fs::read_file((hf / name).string());
  };
  using config::TokenizerType;
  if (t.type == TokenizerType::kWordPiece) {
    files["vocab.txt"] = fs::read_file(t.model);
    const char* strip = t.strip_accents == config::StripAccents::kAuto  ? "null"
                        : t.strip_accents == config::StripAccents::kYes ? "true"
                                                                        : "false";
    // ropelab's wordpiece is BertTokenizer's (RoFormer's jieba pre-split is not done).
    files["tokenizer_config.json"] = fmt::format(
        "{{\n  \"tokenizer_class\": \"BertTokenizer\",\n  \"do_lower_case\": {},\n  "
        "\"strip_accents\": {},\n  \"tokenize_chinese_chars\": true\n}}\n",
        t.lowercase ? "true" : "false", strip);
  } else if (t.type == TokenizerType::kBpe) {
    files["tokenizer.json"] = fs::read_file(t.model);
    keep("tokenizer_config.json");
    keep("special_tokens_map.json");
  } else if (t.type == TokenizerType::kSpm && !t.vocab_order.empty()) {
    files["tokenizer.model"] = fs::read_file(t.model);
    keep("tokenizer_config.json");
    keep("special_tokens_map.json");
  } else if (t.type == TokenizerType::kSpm && cls.rfind("Llama", 0) == 0 &&
             stdfs::is_directory(hf)) {
    // An imported checkpoint that came without a tokenizer: its data section is the default
    // one, whose prepared model (if the working directory has one) is not this checkpoint's.
    note = "no tokenizer written: the imported checkpoint came without one";
  } else if (t.type == TokenizerType::kSpm && cls.rfind("Llama", 0) == 0 &&
             !stdfs::is_regular_file(plan.tokenizer_path)) {
    note = "no tokenizer written: the run's SentencePiece model " + plan.tokenizer_path +
           " does not exist (data never prepared)";
  } else if (t.type == TokenizerType::kSpm && cls.rfind("Llama", 0) == 0) {
    // ropelab's own SentencePiece model: LlamaTokenizer reads it (specials from the model).
    files["tokenizer.model"] = fs::read_file(plan.tokenizer_path);
    files["tokenizer_config.json"] =
        "{\n  \"tokenizer_class\": \"LlamaTokenizer\",\n  \"add_bos_token\": false,\n  "
        "\"add_eos_token\": false,\n  \"legacy\": true,\n  \"unk_token\": \"<unk>\",\n  "
        "\"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n  \"pad_token\": \"<pad>\"\n}\n";
  } else {
    note = std::string("no tokenizer written: ") + config::to_string(t.type) +
           " tokenizers have no Hugging Face counterpart for " + cls;
  }
  keep("generation_config.json");
  return files;
}

}  // namespace

namespace {
// What no exported class computes yet, whatever the architecture: sinks and SSMax. (Layouts
// and QK-norm are each family's to judge: the Llama-layout classes write sliding windows, and
// Qwen3 has QK-norm.)
std::string layout_mismatch(const config::Config& c) {
  const auto& m = c.model;
  if (m.attention.sinks) return "attention sinks (model.attention.sinks)";
  if (m.attention.ssmax > 0) return "Scalable-Softmax (model.attention.ssmax)";
  return "";
}
}  // namespace

std::string export_hf(const std::string& run, const std::string& out, HfConfigForm form) {
  if (stdfs::exists(out)) throw UserError(out + ": already exists; choose another --out");
  auto rm = weights::load_run_model(run, /*best=*/true);
  const config::Config& c = rm.config;
  if (auto why = layout_mismatch(c); !why.empty())
    throw UserError(run + ": no Hugging Face class here computes this model: it has " + why +
                    ", which the exported classes lack");
  // The class: the first family that computes exactly what the run's model computes.
  const Family* family = nullptr;
  std::string why_not;  // each family of the run's architecture: "Class: what differs"
  for (const Family* f : families()) {
    const std::string why = f->mismatch(c);
    if (why.empty()) {
      family = f;
      break;
    }
    if (f->arch == c.model.arch)
      why_not += (why_not.empty() ? "" : "; ") + f->export_class + ": " + why;
  }
  if (family == nullptr)
    throw UserError(run + ": no Hugging Face class computes this model: " +
                    (why_not.empty() ? std::string("an encoder-decoder has none here") : why_not));
  ExportSource src;
  src.config = &c;
  src.form = form;
  const auto kept = stdfs::path(rm.run_dir) / "hf" / "config.json";
  if (stdfs::is_regular_file(kept)) {
    try {
      src.origin = nlohmann::json::parse(fs::read_file(kept.string()));
    } catch (const nlohmann::json::exception& e) {
      throw UserError(kept.string() + ": not valid JSON (" + e.what() + ")");
    }
  }
  {
    torch::NoGradGuard ng;
    for (auto& [name, t] : weights::state_dict(*rm.model))
      src.weights[name] = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  }
  const data::Plan plan = run::plan_of(c);
  if (std::holds_alternative<config::GlueTaskConfig>(c.task.opts)) {
    const auto& g = plan.glue;
    src.labels = g.regression ? std::vector<std::string>{} : g.label_names;
  }
  src.order = tokenizers::run_vocab_order(c.data.tokenizer, rm.vocab, rm.run_dir);
  const Exported e = family->write(src);
  const std::string cls = e.config["architectures"][0].get<std::string>();
  std::string note;
  auto tok = tokenizer_files(c, plan, rm.run_dir, cls, note);

  std::vector<TensorOut> outs;
  for (const auto& [name, t] : e.tensors)
    outs.push_back(TensorOut{name, DType::kF32, t.sizes().vec(), t.data_ptr()});
  const std::string tmp = out + ".tmp";
  std::error_code ec;
  stdfs::remove_all(tmp, ec);
  try {
    fs::make_dirs(tmp);
    write_file((stdfs::path(tmp) / "model.safetensors").string(), outs, {{"format", "pt"}});
    fs::write_file_atomic((stdfs::path(tmp) / "config.json").string(), e.config.dump(2) + "\n");
    for (const auto& [name, bytes] : tok)
      fs::write_file_atomic((stdfs::path(tmp) / name).string(), bytes);
    stdfs::rename(tmp, out);
  } catch (...) {
    stdfs::remove_all(tmp, ec);
    throw;
  }
  std::string summary = fmt::format("exported {} ({} tensors, vocabulary {}) from {} to {}", cls,
                                    outs.size(), rm.vocab, run, out);
  if (!note.empty()) summary += "; " + note;
  return summary;
}

}  // namespace ropelab::hf
