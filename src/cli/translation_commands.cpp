// The `ropelab` subcommands `translate`, `average` and `bleu`: a translation run used and scored
// (eval/translate.h, scoring/).
#include "cli/command.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "eval/export.h"
#include "eval/translate.h"
#include "scoring/metrics.h"
#include "text/lines.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/signals.h"

namespace ropelab::cli {

namespace {

int cmd_translate() {
  std::string data;
  if (g.input.empty() || g.input == "-") {
    std::ostringstream os;
    os << std::cin.rdbuf();
    data = os.str();
  } else {
    data = fs::read_file(g.input);
  }
  const std::string name = g.input.empty() || g.input == "-" ? "stdin" : g.input;
  auto lines = text::split_lines(data, name);
  if (lines.empty()) throw UserError(name + ": no input lines to translate");
  eval::TranslateOptions o;
  o.beam = g.beam;
  o.lenpen = g.lenpen;
  o.batch_tokens = g.batch_tokens;
  o.use_best = !g.use_latest;
  o.use_cache = !g.no_cache;
  auto out = eval::translate_lines(g.file, lines, o);
  signals::throw_if_stopped("translate", "nothing written: the output would be partial");
  std::string text;
  for (const auto& l : out) text += l + "\n";
  if (g.out.empty())
    std::cout << text << std::flush;
  else
    fs::write_file_atomic(g.out, text);
  return 0;
}

int cmd_average() {
  std::cout << eval::average_checkpoints(g.file, g.last, g.out) << "\n";
  return 0;
}

// A paired-test seed: a non-negative integer (sacreBLEU's "none", a seed from the OS, would make
// the p-values unrepeatable, so it is not offered).
uint64_t parse_seed(const std::string& v, const std::string& what) {
  bool digits = !v.empty() && v.size() <= 19 &&
                std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits)
    throw UserError(what + " '" + v +
                    "': a non-negative integer (e.g. 12345, sacreBLEU's default)");
  return std::stoull(v);
}

int cmd_bleu() {
  g.score.metrics.clear();
  for (size_t at = 0; at <= g.metrics.size();) {
    auto comma = std::min(g.metrics.find(',', at), g.metrics.size());
    g.score.metrics.push_back(g.metrics.substr(at, comma - at));
    at = comma + 1;
  }
  if (const char* seed = std::getenv("SACREBLEU_SEED"); seed != nullptr && !g.seed_given)
    g.score.seed = parse_seed(seed, "$SACREBLEU_SEED");
  auto scored = scoring::score_files(g.hyps, g.refs, g.score);
  for (const auto& w : scored.warnings) spdlog::warn("{}", w);
  std::cout << scored.text;
  return 0;
}

}  // namespace

// `translate`, `average` and `bleu`.
void register_translation(CLI::App& app) {
  add(
      app, "translate",
      "Translate raw text with a trained translation run: reads lines from stdin (or --input),\n"
      "writes one detokenised translation per line, in input order, to stdout (or --out,\n"
      "written atomically). Beam search with the run's task.beam / task.lenpen unless given.\n"
      "Example: ropelab translate runs/mt --beam 4 --lenpen 0.6 < test.en > hyp.es",
      [](CLI::App& sub) {
        sub.add_option("run", g.file, "run directory, averaged run (ropelab average) or checkpoint")
            ->required();
        sub.add_option("--beam", g.beam, "beam size (1 = greedy; default: the run's task.beam)")
            ->check(CLI::Range(1, 64));
        sub.add_option("--lenpen", g.lenpen,
                       "length penalty: score / length^lenpen (default: the run's task.lenpen)")
            ->check(CLI::Range(0.0, 10.0));
        sub.add_option("--batch-tokens", g.batch_tokens, "source tokens per batch, beams included")
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
            ->capture_default_str();
        sub.add_option("--input", g.input, "read this file instead of stdin");
        sub.add_option("--out", g.out, "write this file (atomically) instead of stdout");
        sub.add_flag("--latest", g.use_latest, "use the newest checkpoint instead of the best");
        sub.add_flag("--no-cache", g.no_cache,
                     "recompute every prefix instead of using the key/value cache (same output)");
      },
      cmd_translate);
  add(
      app, "average",
      "Average the weights of a run's last N checkpoints (the paper evaluates the average of the\n"
      "last 5) into a new run directory that translate, eval and export accept.",
      [](CLI::App& sub) {
        sub.add_option("run", g.file, "run directory")->required();
        sub.add_option("--last", g.last, "how many of the newest checkpoints")
            ->check(CLI::Range(int64_t{1}, int64_t{1000}))
            ->capture_default_str();
        sub.add_option("--out", g.out, "new directory (must not exist)")->required();
      },
      cmd_average);
  add(
      app, "bleu",
      "Score translations like sacreBLEU 2.x: corpus BLEU (13a tokenization, exp smoothing)\n"
      "and chrF2 by default, TER and chrF++ on request, printed with sacreBLEU's signatures;\n"
      "or one score per segment (--sentence-level). With several --hyp files, each system is\n"
      "compared with the first by sacreBLEU's paired bootstrap resampling and approximate\n"
      "randomization tests (same p-values for the same seed). One segment per line; every file\n"
      "must have the same number of lines.",
      [](CLI::App& sub) {
        sub.add_option("--ref", g.refs, "reference file (repeat for several references)")
            ->required();
        sub.add_option("--hyp", g.hyps,
                       "hypothesis file; repeat to compare systems: the first is the baseline, "
                       "and each other is tested against it")
            ->required();
        sub.add_option("--metrics,-m", g.metrics, "comma-separated: bleu, chrf, ter")
            ->capture_default_str();
        sub.add_option("--tokenize", g.score.bleu.tokenize,
                       "BLEU's tokenizer, as sacreBLEU's: 13a (the default), intl (Unicode "
                       "punctuation and symbols), zh (Chinese characters one by one, then 13a), "
                       "char (every character a token) or none (pre-tokenized input)")
            ->capture_default_str();
        sub.add_flag("--lowercase", g.score.bleu.lowercase, "case-insensitive BLEU (case:lc)");
        sub.add_flag("--force", g.score.force,
                     "no warning when many hypotheses end in a tokenized period");
        sub.add_flag("--chrf-lowercase", g.score.chrf.lowercase, "case-insensitive chrF (case:lc)");
        sub.add_option("--chrf-word-order", g.score.chrf.word_order,
                       "word n-gram order of chrF: 2 gives chrF++ (nw:2)")
            ->capture_default_str();
        sub.add_flag("--ter-case-sensitive", g.score.ter.case_sensitive,
                     "case-sensitive TER (TER is case-insensitive by default, as Tercom)");
        sub.add_flag("--ter-normalized", g.score.ter.normalized,
                     "TER: Tercom's normalisation (punctuation split as in mteval)");
        sub.add_flag("--ter-no-punct", g.score.ter.no_punct, "TER: remove punctuation");
        sub.add_flag("--ter-asian-support", g.score.ter.asian_support,
                     "TER: split CJK characters (with --ter-normalized) and remove CJK "
                     "punctuation (with --ter-no-punct)");
        sub.add_flag("--sentence-level,-s", g.score.sentence_level,
                     "one score per segment and metric (BLEU with effective order, eff:yes)");
        sub.add_option("--paired", g.score.paired,
                       "with several --hyp: bs (paired bootstrap resampling), ar (approximate "
                       "randomization) or both")
            ->capture_default_str();
        sub.add_option("--paired-bs-n", g.score.paired_bs_n, "bootstrap resamples")
            ->capture_default_str();
        sub.add_option("--paired-ar-n", g.score.paired_ar_n, "approximate randomization trials")
            ->capture_default_str();
        sub.add_option_function<std::string>(
            "--paired-seed",
            [](const std::string& v) {
              g.score.seed = parse_seed(v, "--paired-seed");
              g.seed_given = true;
            },
            "seed of the paired tests' NumPy generator (default 12345, or $SACREBLEU_SEED, as "
            "sacreBLEU)");
      },
      cmd_bleu);
}

}  // namespace ropelab::cli
