// The `ropelab` subcommands `perplexity` and `passkey`: a causal LM's long-context evaluation
// as the context-extension papers report it (eval/long_context.h).
#include <iostream>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "eval/long_context.h"
#include "util/error.h"

namespace ropelab::cli {

namespace {

struct LongOpts {
  std::string split = "test";
  std::string lengths, depths = "0,0.25,0.5,0.75,1", rope_scaling, key = "auto";
  std::string text, separator;
  int64_t stride = 0, doc_tokens = 0, documents = 0, trials = 5, seed = 1;
  bool no_save = false;
} long_opts;

std::vector<double> parse_depths(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(v >= 0 && v <= 1))
      throw UserError("--depths: '" + item + "' is not a number in [0, 1] (expected e.g. 0,0.5,1)");
    out.push_back(v);
  }
  if (out.empty()) throw UserError("--depths: give at least one depth in [0, 1]");
  return out;
}

eval::LmSource source() { return {!g.use_latest, long_opts.rope_scaling, !long_opts.no_save}; }

int cmd_perplexity() {
  if (!long_opts.separator.empty() && long_opts.text.empty())
    throw UserError("--separator divides the documents of --text FILE: give --text too");
  eval::PerplexityOptions o;
  o.split = long_opts.split;
  o.text = long_opts.text;
  o.separator = long_opts.separator;
  o.windows = parse_lengths(long_opts.lengths, "--windows");
  o.stride = long_opts.stride;
  o.doc_tokens = long_opts.doc_tokens;
  o.max_documents = long_opts.documents;
  o.source = source();
  std::cout << eval::format_perplexity(eval::sliding_perplexity(g.file, o));
  return 0;
}

int cmd_passkey() {
  eval::PasskeyOptions o;
  o.lengths = parse_lengths(long_opts.lengths, "--lengths");
  o.depths = parse_depths(long_opts.depths);
  o.trials = long_opts.trials;
  o.seed = long_opts.seed;
  o.key = long_opts.key == "digits"  ? eval::PasskeyKey::kDigits
          : long_opts.key == "words" ? eval::PasskeyKey::kWords
                                     : eval::PasskeyKey::kAuto;
  o.source = source();
  std::cout << eval::format_passkey(eval::passkey_retrieval(g.file, o));
  return 0;
}

void add_common(CLI::App& sub) {
  sub.add_option("run", g.file, "run directory (trained, or made by import-hf)")->required();
  sub.add_flag("--latest", g.use_latest, "use the newest checkpoint instead of the best one");
  sub.add_option("--rope-scaling", long_opts.rope_scaling,
                 "METHOD:FACTOR[@KIND,...] or base:BASE: evaluate with a context-extension "
                 "method or a RoPE base the run was not trained with (as `eval --rope-scaling`: "
                 "linear, ntk, dynamic, yarn, llama3, longrope; e.g. yarn:4, base:500000)");
  sub.add_flag("--no-save", long_opts.no_save,
               "print the report only: write nothing into the run (no lock needed)");
}

}  // namespace

void register_long_context(CLI::App& app) {
  add(
      app, "perplexity",
      "Sliding-window perplexity of a causal LM on long documents, by window size (the\n"
      "protocol of position interpolation, YaRN and LongRoPE): windows of W tokens start every\n"
      "--stride tokens and each scores only the tokens the previous one did not reach, so every\n"
      "token is scored once with W - stride to W tokens before it. Every window size reads the\n"
      "same tokens (each document's first --doc-tokens), so the rows pair. Writes\n"
      "RUN/perplexity-SPLIT[-rope-...].json.",
      [](CLI::App& sub) {
        add_common(sub);
        sub.add_option("--split", long_opts.split, "valid or test")->capture_default_str();
        sub.add_option("--text", long_opts.text,
                       "a text file (plain, gzip or zstd) to read instead of a split, tokenized "
                       "with the run's "
                       "tokenizer (an imported checkpoint's too): a document per line, or see "
                       "--separator");
        sub.add_option("--separator", long_opts.separator,
                       "with --text: a line equal to this ends a document (e.g. ---)");
        sub.add_option("--windows", long_opts.lengths,
                       "comma-separated window sizes; default 1,2,4,8,16 x task.seq_len");
        sub.add_option("--stride", long_opts.stride,
                       "tokens between window starts; default half the smallest window");
        sub.add_option("--doc-tokens", long_opts.doc_tokens,
                       "tokens read of each document (shorter documents are left out); default "
                       "the largest window");
        sub.add_option("--documents", long_opts.documents,
                       "at most this many documents (0: every long enough one)")
            ->capture_default_str();
      },
      cmd_perplexity);
  add(
      app, "passkey",
      "Zero-shot passkey retrieval (the prompt of LongLoRA and YaRN): a 5-digit key (or five\n"
      "number words) hidden at a depth of repeated filler text, asked for at the end, answered\n"
      "greedily by a causal LM never trained on the task. Prints accuracy by prompt length and\n"
      "depth; writes RUN/passkey[-rope-...].json.",
      [](CLI::App& sub) {
        add_common(sub);
        sub.add_option("--lengths", long_opts.lengths,
                       "comma-separated prompt lengths in tokens; default 1,2,4,8,16 x "
                       "task.seq_len");
        sub.add_option("--depths", long_opts.depths,
                       "where the key sits in the filler, 0 (start) to 1 (end)")
            ->capture_default_str();
        sub.add_option("--trials", long_opts.trials, "keys per length and depth")
            ->capture_default_str();
        sub.add_option("--seed", long_opts.seed, "seed of the keys")->capture_default_str();
        sub.add_option("--key", long_opts.key,
                       "the key's form: digits (12345), words (five number words, 'seven four "
                       "one nine two'), or auto: digits where the tokenizer can write them (a "
                       "tokenizer that learned only the Bible cannot)")
            ->check(CLI::IsMember({"auto", "digits", "words"}))
            ->capture_default_str();
      },
      cmd_passkey);
}

}  // namespace ropelab::cli
