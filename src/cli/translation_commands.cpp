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

// This file's commands' options (the shared ones are cli::g's: command.h).
struct TranslationOpts {
  int64_t beam = 0;
  double lenpen = -1;
  int64_t batch_tokens = 4096;
  std::string input;
  bool no_cache = false;
  int64_t last = 5;
  std::vector<std::string> refs, hyps;
  scoring::ScoreOptions score;
  std::string metrics = "bleu,chrf";
  bool seed_given = false;
} translation_opts;

int cmd_translate() {
  std::string data;
  if (translation_opts.input.empty() || translation_opts.input == "-") {
    std::ostringstream os;
    os << std::cin.rdbuf();
    data = os.str();
  } else {
    data = fs::read_file(translation_opts.input);
  }
  const std::string name = translation_opts.input.empty() || translation_opts.input == "-"
                               ? "stdin"
                               : translation_opts.input;
  auto lines = text::split_lines(data, name);
  if (lines.empty()) throw UserError(name + ": no input lines to translate");
  eval::TranslateOptions o;
  o.beam = translation_opts.beam;
  o.lenpen = translation_opts.lenpen;
  o.batch_tokens = translation_opts.batch_tokens;
  o.use_best = !g.use_latest;
  o.use_cache = !translation_opts.no_cache;
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
  std::cout << eval::average_checkpoints(g.file, translation_opts.last, g.out) << "\n";
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
  translation_opts.score.metrics.clear();
  for (size_t at = 0; at <= translation_opts.metrics.size();) {
    auto comma = std::min(translation_opts.metrics.find(',', at), translation_opts.metrics.size());
    translation_opts.score.metrics.push_back(translation_opts.metrics.substr(at, comma - at));
    at = comma + 1;
  }
  if (const char* seed = std::getenv("SACREBLEU_SEED");
      seed != nullptr && !translation_opts.seed_given)
    translation_opts.score.seed = parse_seed(seed, "$SACREBLEU_SEED");
  auto scored =
      scoring::score_files(translation_opts.hyps, translation_opts.refs, translation_opts.score);
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
        sub.add_option("--beam", translation_opts.beam,
                       "beam size (1 = greedy; default: the run's task.beam)")
            ->check(CLI::Range(1, 64));
        sub.add_option("--lenpen", translation_opts.lenpen,
                       "length penalty: score / length^lenpen (default: the run's task.lenpen)")
            ->check(CLI::Range(0.0, 10.0));
        sub.add_option("--batch-tokens", translation_opts.batch_tokens,
                       "source tokens per batch, beams included")
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
            ->capture_default_str();
        sub.add_option("--input", translation_opts.input, "read this file instead of stdin");
        sub.add_option("--out", g.out, "write this file (atomically) instead of stdout");
        sub.add_flag("--latest", g.use_latest, "use the newest checkpoint instead of the best");
        sub.add_flag("--no-cache", translation_opts.no_cache,
                     "recompute every prefix instead of using the key/value cache (same output)");
      },
      cmd_translate);
  add(
      app, "average",
      "Average the weights of a run's last N checkpoints (the paper evaluates the average of the\n"
      "last 5) into a new run directory that translate, eval and export accept.",
      [](CLI::App& sub) {
        sub.add_option("run", g.file, "run directory")->required();
        sub.add_option("--last", translation_opts.last, "how many of the newest checkpoints")
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
        sub.add_option("--ref", translation_opts.refs,
                       "reference file (repeat for several references)")
            ->required();
        sub.add_option("--hyp", translation_opts.hyps,
                       "hypothesis file; repeat to compare systems: the first is the baseline, "
                       "and each other is tested against it")
            ->required();
        sub.add_option("--metrics,-m", translation_opts.metrics, "comma-separated: bleu, chrf, ter")
            ->capture_default_str();
        sub.add_option("--tokenize", translation_opts.score.bleu.tokenize,
                       "BLEU's tokenizer, as sacreBLEU's: 13a (the default), intl (Unicode "
                       "punctuation and symbols), zh (Chinese characters one by one, then 13a), "
                       "char (every character a token) or none (pre-tokenized input)")
            ->capture_default_str();
        sub.add_flag("--lowercase", translation_opts.score.bleu.lowercase,
                     "case-insensitive BLEU (case:lc)");
        sub.add_flag("--force", translation_opts.score.force,
                     "no warning when many hypotheses end in a tokenized period");
        sub.add_flag("--chrf-lowercase", translation_opts.score.chrf.lowercase,
                     "case-insensitive chrF (case:lc)");
        sub.add_option("--chrf-word-order", translation_opts.score.chrf.word_order,
                       "word n-gram order of chrF: 2 gives chrF++ (nw:2)")
            ->capture_default_str();
        sub.add_flag("--ter-case-sensitive", translation_opts.score.ter.case_sensitive,
                     "case-sensitive TER (TER is case-insensitive by default, as Tercom)");
        sub.add_flag("--ter-normalized", translation_opts.score.ter.normalized,
                     "TER: Tercom's normalisation (punctuation split as in mteval)");
        sub.add_flag("--ter-no-punct", translation_opts.score.ter.no_punct,
                     "TER: remove punctuation");
        sub.add_flag("--ter-asian-support", translation_opts.score.ter.asian_support,
                     "TER: split CJK characters (with --ter-normalized) and remove CJK "
                     "punctuation (with --ter-no-punct)");
        sub.add_flag("--sentence-level,-s", translation_opts.score.sentence_level,
                     "one score per segment and metric (BLEU with effective order, eff:yes)");
        sub.add_option("--paired", translation_opts.score.paired,
                       "with several --hyp: bs (paired bootstrap resampling), ar (approximate "
                       "randomization) or both")
            ->capture_default_str();
        sub.add_option("--paired-bs-n", translation_opts.score.paired_bs_n, "bootstrap resamples")
            ->capture_default_str();
        sub.add_option("--paired-ar-n", translation_opts.score.paired_ar_n,
                       "approximate randomization trials")
            ->capture_default_str();
        sub.add_option_function<std::string>(
            "--paired-seed",
            [](const std::string& v) {
              translation_opts.score.seed = parse_seed(v, "--paired-seed");
              translation_opts.seed_given = true;
            },
            "seed of the paired tests' NumPy generator (default 12345, or $SACREBLEU_SEED, as "
            "sacreBLEU)");
      },
      cmd_bleu);
}

}  // namespace ropelab::cli
