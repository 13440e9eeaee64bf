// Hugging Face checkpoints into ropelab runs: `ropelab import-hf DIR --out RUN`.
//
// DIR is what `save_pretrained` writes: config.json, model.safetensors (or the shards that
// model.safetensors.index.json lists) and the tokenizer's files. config.json's
// `architectures[0]` picks the class's mapping (one file per family, listed in
// hf/families.cpp: hf/bert.cpp, hf/roformer.cpp, hf/llama.cpp, hf/gemma3.cpp). The
// mapping turns config.json into the run's config (as `key=value` overrides, so every config
// check applies and an error names config.json) and renames every tensor onto ropelab's
// modules. A class, config value or tensor that ropelab cannot represent exactly is a UserError
// naming it (exit 2): an import either computes what the checkpoint computes or is refused.
//
// The vocabulary is re-numbered. ropelab's tasks use fixed special ids (tokenizers::Special: pad 0,
// unk 1, bos 2, eos 3, cls 4, sep 5, mask 6); a checkpoint has its own ([CLS] is 101 in BERT).
// The importer permutes the rows of the token embeddings and of the output layer so that the
// checkpoint's specials sit at ropelab's ids, which computes the same function on re-numbered
// tokens. `vocab_order` records the permutation (ropelab id r is the checkpoint's id
// vocab_order[r]); the run keeps it in hf/vocab_order.json.
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "config/schema.h"

namespace ropelab::hf {

struct Imported {
  std::string architecture;  // config.json's architectures[0]
  config::Config config;     // the run's config (checked)
  int64_t vocab = 0;         // the model's vocabulary size
  std::vector<int64_t> vocab_order;
  std::map<std::string, at::Tensor> weights;  // by ropelab's parameter names, float32
  // ropelab parameters the checkpoint has no counterpart for (the MLM head of a bare
  // BertModel): they keep their initialisation. Filled by import_hf(), which builds the model.
  std::vector<std::string> initialised;
  // Checkpoint tensors with no counterpart in the run's model (a pooler next to an MLM head),
  // and buffers that are recomputed (position ids).
  std::vector<std::string> unused;
  std::string note;  // what the summary should say besides (a label order assumed)
  // config.json keys that were neither used nor known to be irrelevant, ignored because the
  // import was told to (--allow-unknown-keys): "key = value".
  std::vector<std::string> ignored_keys;
};

// Reads and maps DIR; `overrides` (key=value, as on `train`'s command line) apply after the
// mapping's. A ...ForSequenceClassification needs them to name its data (data.source, ...):
// its labels must be the data's, and the classifier's rows are put in the data's label order
// where id2label names them. UserError naming the file and the key for anything unsupported,
// missing, damaged or of the wrong shape, and for a config.json key ropelab does not know
// (hf/config_keys.cpp) unless `allow_unknown_keys`.
Imported read_hf(const std::string& dir, const std::vector<std::string>& overrides = {},
                 bool allow_unknown_keys = false);

// Every class import-hf reads, comma-separated in the families' order (hf/families.cpp):
// "BertModel, BertForMaskedLM, ...".
std::string supported_classes();

// read_hf(), then the run directory `out`: config.yaml, one model-only checkpoint (loaded as
// any run's: weights::load_run_model) and hf/ (config.json, the tokenizer's files and
// vocab_order.json). `out` must not exist; it appears complete or not at all. Returns a
// one-line summary, which lists every config.json key ignored under `allow_unknown_keys`.
std::string import_hf(const std::string& dir, const std::string& out,
                      const std::vector<std::string>& overrides = {},
                      bool allow_unknown_keys = false);

}  // namespace ropelab::hf
