// An ablation experiment file's structs (`ropelab ablate`; read by config/experiments.cpp):
// one base config, variants, and optionally tasks, settings and seeds to sweep.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/visit.h"

namespace ropelab::config {

// One variant of an ablation: a name and the overrides that make it; a stage names the
// variant whose finished run it starts from (variants only).
struct Variant {
  std::string name;
  std::vector<std::string> set;
  std::string from;
  template <class V>
  void visit(V& v) {
    v("name", name, "variant name (the run directory's name)", required());
    v("set", set, "dotted key=value overrides applied to the base config");
    v("from", from,
      "variants: a stage that starts from this other variant's finished run of the same task, "
      "setting and seed (task.init_from; its positions may change, e.g. a longer task.seq_len "
      "and a RoPE scaling); ablate trains the stages in order and reuses finished ones");
  }
};

// An ablation: one base config, several variants, same data order and seed.
struct Experiment {
  std::string name;
  std::string base;
  std::string out_dir = "runs";
  std::vector<std::string> set;
  std::vector<Variant> variants;
  std::vector<Variant> tasks;
  std::vector<Variant> settings;
  std::vector<int64_t> seeds;
  std::string baseline;
  double target_loss = 0.0;
  bool test = false;
  std::vector<int64_t> eval_lengths;
  std::vector<std::string> eval_rope_scaling;
  int64_t eval_tokens = 16384;
  std::vector<int64_t> eval_windows;
  int64_t eval_stride = 0;
  int64_t eval_doc_tokens = 0;
  int64_t eval_passkey = 0;
  bool probe = false;
  int64_t probe_examples = 128;
  template <class V>
  void visit(V& v) {
    v("name", name, "experiment name; runs go to out_dir/name/<variant>", required());
    v("base", base, "base run config (path relative to this file)", required());
    v("out_dir", out_dir, "parent directory of the experiment");
    v("set", set, "overrides applied to every variant");
    v("variants", variants, "the variants to train and compare", required());
    v("tasks", tasks,
      "tasks (name + set), e.g. GLUE tasks: every variant x setting x seed is trained on each, "
      "and the sweep is reported per variant with one row per task");
    v("settings", settings,
      "sweep: hyperparameter settings (name + set), each tried with every variant; the best "
      "per variant is chosen on the validation split by the task's selection metric");
    v("seeds", seeds,
      "sweep: run.seed values; every variant x setting is trained once per seed and reported "
      "as mean +- std over them");
    v("baseline", baseline,
      "with seeds: the variant the others are tested against (paired t-test over seeds); "
      "default: the first variant");
    v("target_loss", target_loss,
      "compare: report steps/tokens to reach this validation loss (0 = off)", at_least(0));
    v("test", test,
      "after training, evaluate every variant on the test split (like `ropelab eval --split "
      "test`; translation decodes it with beam search) and show those metrics too");
    v("eval_lengths", eval_lengths,
      "length generalisation: after training, evaluate every run's validation loss at these "
      "context lengths (the same token budget at each), into lengths.md and "
      "loss_by_length.png",
      at_least(2));
    v("eval_rope_scaling", eval_rope_scaling,
      "with eval_lengths: also evaluate each RoPE run with these evaluation-time methods "
      "(METHOD:FACTOR, as `ropelab eval --rope-scaling`, e.g. yarn:4)");
    v("eval_tokens", eval_tokens, "with eval_lengths: tokens evaluated per length",
      between(1, 1e12));
    v("eval_windows", eval_windows,
      "long documents: after training, every causal LM's sliding-window perplexity on the test "
      "split (the validation split of your text without a test file) at these window sizes "
      "(`ropelab perplexity`; RoPE runs trained without a scaling and not started from another "
      "run also with each eval_rope_scaling), into perplexity.md and perplexity_by_window.png; "
      "with seeds, means and paired t-tests over them",
      at_least(2));
    v("eval_stride", eval_stride,
      "with eval_windows: tokens between window starts; 0 = half the smallest window", at_least(0));
    v("eval_doc_tokens", eval_doc_tokens,
      "with eval_windows: tokens read of each document (shorter ones are left out); 0 = the "
      "largest window",
      at_least(0));
    v("eval_passkey", eval_passkey,
      "with eval_windows: zero-shot passkey retrieval (`ropelab passkey`) of the same runs at "
      "each window size that holds the prompt, this many keys per length and depth (0 = off)",
      at_least(0));
    v("probe", probe,
      "after training, run `ropelab probe` on every run (the length-generalisation card: "
      "exact match at 1x-8x the training size, perplexity at 1x-8x the training length) and "
      "report the card, mean +- std over seeds, in card.md and card.png");
    v("probe_examples", probe_examples, "with probe: examples per size band (and passkey depth)",
      between(1, 1e6));
  }
};

}  // namespace ropelab::config
