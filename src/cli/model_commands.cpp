// The `ropelab` subcommands `export`, `import-hf`, `config` and `info`: weights in and out
// (eval/export.h, hf/), a config read back, the machine.
#include "cli/command.h"
#include "cli/commands.h"

#include <iostream>
#include <sstream>

#include "cli/sysinfo.h"
#include "config/loader.h"
#include "eval/export.h"
#include "hf/export.h"
#include "hf/import.h"
#include "run/run.h"
#include "util/error.h"

namespace ropelab::cli {

namespace {

// This file's commands' options (the shared ones are cli::g's: command.h).
struct ModelOpts {
  bool schema = false;
  std::string format = "h5";
  bool allow_unknown_keys = false;  // import-hf
  bool hf_v4 = false;               // export --format hf
} model_opts;

int cmd_export() {
  std::cout << (model_opts.format == "hf" ? hf::export_hf(g.file, g.out,
                                                          model_opts.hf_v4 ? hf::HfConfigForm::kV4
                                                                           : hf::HfConfigForm::kV5)
                                          : eval::export_weights(g.file, g.out))
            << "\n";
  return 0;
}

int cmd_import_hf() {
  std::cout << hf::import_hf(g.file, g.out, g.overrides, model_opts.allow_unknown_keys) << "\n";
  return 0;
}

int cmd_config() {
  if (model_opts.schema) {
    std::cout << config::schema();
    return 0;
  }
  if (g.file.empty()) throw UserError("config: give a config file, or --schema");
  auto c = config::load_config(g.file, config::overrides_from_args(g.overrides));
  run::plan_of(c);  // what the data decides (the synthetic sources' bounds)
  std::cout << config::dump(c);
  return 0;
}

int cmd_info() {
  std::cout << sysinfo::report();
  return 0;
}

}  // namespace

// `export`, `import-hf`, `config` and `info`.
void register_models(CLI::App& app) {
  add(
      app, "export",
      "Export a trained model's weights to HDF5 (--format h5: every tensor under its module\n"
      "path, the config as attributes, for Python/h5py), or as a Hugging Face checkpoint\n"
      "directory (--format hf: config.json, model.safetensors, the tokenizer's files) in the\n"
      "first class that computes exactly the run's model (the classes `import-hf --help` lists).\n"
      "A model no such class computes is refused, naming the difference for each.",
      [](CLI::App& sub) {
        sub.add_option("source", g.file,
                       "run directory (hf: its best checkpoint) or checkpoint "
                       "directory")
            ->required();
        sub.add_option("--out", g.out, "output .h5 file, or new directory for --format hf")
            ->required();
        sub.add_option("--format", model_opts.format, "h5 or hf")
            ->check(CLI::IsMember({"h5", "hf"}))
            ->capture_default_str();
        sub.add_flag("--hf-v4", model_opts.hf_v4,
                     "hf: write config.json's RoPE settings as transformers 4 did (rope_theta, "
                     "rope_scaling), which 4.x and 5 read; the default is transformers 5's "
                     "rope_parameters, which 4.x ignores");
      },
      cmd_export);
  add(
      app, "import-hf",
      "Import a Hugging Face checkpoint directory (config.json, model.safetensors or its shards,\n"
      "the tokenizer's files) as a new run directory (config.yaml, a model-only checkpoint,\n"
      "hf/). " +
          wrapped("Classes: " + hf::supported_classes() + ".", 90) +
          "\n"
          "A ...Model or ...ForMaskedLM encoder becomes an MLM run (a bare model gets a new MLM\n"
          "head); a ...ForSequenceClassification a GLUE run (name its data with overrides, e.g.\n"
          "data.source=glue data.glue_task=SST-2 data.train=DIR); a ...ForCausalLM a CLM run,\n"
          "with RoPE scaling from transformers 4's rope_theta/rope_scaling or 5's\n"
          "rope_parameters. The run tokenizes with the checkpoint's tokenizer (vocab.txt:\n"
          "wordpiece; a byte-level tokenizer.json: bpe; tokenizer.model: spm), re-numbered so its\n"
          "specials sit at ropelab's special ids (RUN/hf/vocab_order.json). A class, config value\n"
          "or tensor ropelab cannot represent exactly is refused, naming it, and so is a\n"
          "config.json key it does not know (--allow-unknown-keys to import anyway).\n"
          "`export --format hf` goes back.",
      [](CLI::App& sub) {
        sub.add_option("dir", g.file, "checkpoint directory (what save_pretrained writes)")
            ->required();
        sub.add_option("--out", g.out, "new run directory (must not exist)")->required();
        sub.add_flag("--allow-unknown-keys", model_opts.allow_unknown_keys,
                     "import even when config.json has keys ropelab does not know (refused by "
                     "default: they may change the model's function); the summary lists them");
        sub.add_option("overrides", g.overrides,
                       "key.path=value overrides of the run's config, applied after the "
                       "checkpoint's (e.g. data.source=bible-sst2)");
      },
      cmd_import_hf);
  add(
      app, "config",
      "Print the fully resolved config (inherit + overrides applied, every default shown), or\n"
      "with --schema every key with its default and meaning. Checks the file strictly: unknown\n"
      "or duplicate keys, wrong types, bad values and cross-field problems are all reported.",
      [](CLI::App& sub) {
        sub.add_option("config", g.file, "YAML config file");
        sub.add_option("overrides", g.overrides, "key.path=value overrides");
        sub.add_flag("--schema", model_opts.schema,
                     "print every config key with its default and help");
      },
      cmd_config);
  add(
      app, "info",
      "Show versions, the BLAS kernel in use, threads, CPU features and whether the\n"
      "SentencePiece module loads.",
      [](CLI::App&) {}, cmd_info);
}

}  // namespace ropelab::cli
