// An experiment's sliding-window perplexity table (lab/long_eval.h).
#include "lab/long_eval.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "eval/evaluate.h"
#include "eval/long_context.h"
#include "lab/compare.h"
#include "util/fs.h"
#include "util/signals.h"

namespace ropelab::lab {

namespace stdfs = std::filesystem;

std::string evaluate_sliding(const config::Experiment& exp, const std::vector<std::string>& dirs,
                             const std::string& out_dir) {
  std::vector<LengthResult> rows;
  nlohmann::json j;
  int64_t train_len = 0, stride = 0, doc_tokens = 0, documents = 0;
  std::string split = "test";
  for (const auto& d : dirs) {
    auto c = config::load_config((stdfs::path(d) / "config.yaml").string());
    if (c.model.arch != config::Arch::kDecoder ||
        config::kind_of(c.data.source) != config::DataKind::kLm)
      continue;  // perplexity is a causal LM's
    train_len = train_len == 0 ? c.task.seq_len : std::min(train_len, c.task.seq_len);
    std::vector<std::string> specs = {""};
    if (eval::has_rope(c.model))
      specs.insert(specs.end(), exp.eval_rope_scaling.begin(), exp.eval_rope_scaling.end());
    for (const auto& spec : specs) {
      spdlog::info("=== perplexity: {}{} ===", d, spec.empty() ? "" : " + " + spec);
      eval::PerplexityOptions o;
      // The test split, or the validation split of your own text without a test file.
      o.split = config::is_builtin(c.data.source) || !c.data.test.empty() ? "test" : "valid";
      split = o.split;
      o.windows = exp.eval_windows;
      o.stride = exp.eval_stride;
      o.doc_tokens = exp.eval_doc_tokens;
      o.source.rope_scaling = spec;
      auto rep = eval::sliding_perplexity(d, o);
      signals::throw_if_stopped("ablation (perplexity of " + d + ")",
                                "every run is trained; run the same command again to finish");
      stride = rep.stride, doc_tokens = rep.doc_tokens, documents = rep.documents;
      LengthResult r;
      r.label = stdfs::path(d).filename().string() + (spec.empty() ? "" : " + " + spec);
      nlohmann::json nll = nlohmann::json::array();
      for (const auto& row : rep.rows) {
        r.loss.push_back(row.applicable ? row.nll : NAN);
        nll.push_back(row.applicable ? nlohmann::json(row.nll) : nlohmann::json());
      }
      j["rows"].push_back({{"label", r.label}, {"nll", nll}});
      rows.push_back(std::move(r));
    }
  }
  if (rows.empty()) {
    spdlog::warn("eval_windows: no run is a causal LM on language-model text; no perplexity");
    return "";
  }
  j["windows"] = exp.eval_windows;
  j["stride"] = stride;
  j["doc_tokens"] = doc_tokens;
  std::string md = fmt::format(
      "\n## Sliding-window perplexity on long documents\n\nNLL on the {} split (nats/token, lower "
      "is better) by window size: windows start every {} tokens and each token is scored once, "
      "with up to the window before it; the first {} tokens of each of {} documents, the same "
      "tokens in every column. `+ METHOD:FACTOR` rows switch that RoPE scaling on at evaluation "
      "time only; ppl = exp(NLL). n/a: beyond a learned position table.\n\n",
      split, stride, doc_tokens, documents);
  md += length_table(rows, exp.eval_windows, train_len);
  fs::make_dirs(out_dir);
  fs::write_file_atomic((stdfs::path(out_dir) / "perplexity.json").string(), j.dump(1) + "\n");
  fs::write_file_atomic((stdfs::path(out_dir) / "perplexity.md").string(), md);
  std::printf("%s\nwrote %s\n", md.c_str(),
              (stdfs::path(out_dir) / "perplexity.md").string().c_str());
  return md;
}

}  // namespace ropelab::lab
