// Every key of an imported config.json is accounted for: used by the class's mapping (which
// marks what it reads, hf/mapping.h Source::use), irrelevant to the function the model computes
// (listed below, with why), or refused naming the key and its value. An unknown key is refused
// too: it may change the computation (a softcapping, a sliding window, a quantization), and
// ropelab cannot tell. The same rule as ropelab's own YAML: no key is silently dropped.
// `import-hf --allow-unknown-keys` imports anyway and lists every key it ignored.
#include <spdlog/fmt/fmt.h>

#include <string_view>

#include "hf/mapping.h"
#include "util/error.h"

namespace ropelab::hf {

namespace {

using nlohmann::json;

// A key transformers may save that does not change what the model computes in evaluation:
// irrelevant whatever its value, or only at the value given (`at_default`, a JSON text), which is
// transformers' default; another value is refused.
struct KnownKey {
  std::string_view key;
  std::string_view why;
  std::string_view at_default = {};  // empty: any value is irrelevant
};

// clang-format off
constexpr KnownKey kKnownKeys[] = {
    // What the file is and how it was saved.
    {"model_type", "architectures names the class"},
    {"transformers_version", "the saving library's version"},
    {"torch_dtype", "the weights' dtype, read from model.safetensors (transformers 4's name)"},
    {"dtype", "the weights' dtype, read from model.safetensors (transformers 5's name)"},
    {"_name_or_path", "where the checkpoint was loaded from"},
    {"_commit_hash", "the hub revision it was loaded from"},
    {"_attn_implementation", "an attention kernel choice (eager, sdpa, flash): same function"},
    {"_attn_implementation_autoset", "an attention kernel choice"},
    {"attn_implementation", "an attention kernel choice"},
    {"auto_map", "the classes of remote code; architectures names the class ropelab maps"},
    {"custom_pipelines", "pipeline registrations"},
    // Training-time and runtime switches.
    {"use_cache", "decoding keeps past keys and values: same outputs"},
    {"cache_implementation", "the cache class generate() uses (Gemma's hybrid): same outputs"},
    {"_sliding_window_pattern", "a private copy transformers does not read back (layer_types or "
                                "sliding_window_pattern say the layers)"},
    {"gradient_checkpointing", "recomputation in training: same outputs"},
    {"hidden_dropout_prob", "dropout: off in evaluation"},
    {"attention_probs_dropout_prob", "dropout: off in evaluation"},
    {"attention_dropout", "dropout: off in evaluation"},
    {"classifier_dropout", "dropout: off in evaluation"},
    {"resid_pdrop", "dropout: off in evaluation"},
    {"embd_pdrop", "dropout: off in evaluation"},
    {"initializer_range", "initialisation of new weights"},
    {"chunk_size_feed_forward", "the feed-forward in chunks: same outputs"},
    {"pretraining_tp", "tensor-parallel slices of the projections: same outputs"},
    {"return_dict", "the Python return type"},
    {"output_hidden_states", "what the Python call returns"},
    {"output_attentions", "what the Python call returns"},
    {"torchscript", "a tracing switch"},
    {"use_bfloat16", "a TF-era dtype switch"},
    {"tf_legacy_loss", "a TF loss switch"},
    {"finetuning_task", "a label of the fine-tuning"},
    {"tokenizer_class", "the tokenizer's files say which tokenizer"},
    {"prefix", "a generation prompt prefix"},
    {"task_specific_params", "pipeline settings"},
    {"problem_type", "the loss of a classification head"},
    {"id2label", "label names (read by ...ForSequenceClassification)"},
    {"label2id", "label names (id2label's inverse)"},
    {"num_labels", "the number of labels (read by ...ForSequenceClassification)"},
    // Special token ids: the Llama-layout classes read them; BERT's come from vocab.txt.
    {"pad_token_id", "a padding id (BERT's [PAD] is read from vocab.txt)"},
    {"bos_token_id", "a generation start id"},
    {"eos_token_id", "a generation stop id"},
    {"sep_token_id", "a separator id (BERT's [SEP] is read from vocab.txt)"},
    {"decoder_start_token_id", "an encoder-decoder's first decoder id"},
    // Generation settings (transformers 4 kept them in config.json).
    {"max_length", "a generation setting"},
    {"min_length", "a generation setting"},
    {"do_sample", "a generation setting"},
    {"early_stopping", "a generation setting"},
    {"num_beams", "a generation setting"},
    {"num_beam_groups", "a generation setting"},
    {"diversity_penalty", "a generation setting"},
    {"temperature", "a generation setting"},
    {"top_k", "a generation setting"},
    {"top_p", "a generation setting"},
    {"typical_p", "a generation setting"},
    {"repetition_penalty", "a generation setting"},
    {"length_penalty", "a generation setting"},
    {"no_repeat_ngram_size", "a generation setting"},
    {"encoder_no_repeat_ngram_size", "a generation setting"},
    {"bad_words_ids", "a generation setting"},
    {"num_return_sequences", "a generation setting"},
    {"output_scores", "a generation setting"},
    {"return_dict_in_generate", "a generation setting"},
    {"forced_bos_token_id", "a generation setting"},
    {"forced_eos_token_id", "a generation setting"},
    {"remove_invalid_values", "a generation setting"},
    {"exponential_decay_length_penalty", "a generation setting"},
    {"suppress_tokens", "a generation setting"},
    {"begin_suppress_tokens", "a generation setting"},
    // GPT-2's older keys and its multiple-choice head (GPT2DoubleHeadsModel's, not the LM's).
    {"n_ctx", "an older copy of n_positions, unread by transformers"},
    {"summary_type", "GPT2DoubleHeadsModel's multiple-choice head"},
    {"summary_use_proj", "GPT2DoubleHeadsModel's multiple-choice head"},
    {"summary_activation", "GPT2DoubleHeadsModel's multiple-choice head"},
    {"summary_proj_to_labels", "GPT2DoubleHeadsModel's multiple-choice head"},
    {"summary_first_dropout", "GPT2DoubleHeadsModel's multiple-choice head"},
    // TF BERT's pooler description, which transformers never reads (bert-base-chinese, ...).
    {"directionality", "a TF BERT note, unread by transformers"},
    {"pooler_fc_size", "a TF BERT note, unread by transformers"},
    {"pooler_num_attention_heads", "a TF BERT note, unread by transformers"},
    {"pooler_num_fc_layers", "a TF BERT note, unread by transformers"},
    {"pooler_size_per_head", "a TF BERT note, unread by transformers"},
    {"pooler_type", "a TF BERT note, unread by transformers"},
    // Structure switches: irrelevant at transformers' default, refused otherwise.
    {"is_encoder_decoder", "the model is not an encoder-decoder", "false"},
    {"is_decoder", "the model is not used as a decoder", "false"},
    {"add_cross_attention", "no cross-attention", "false"},
    {"tie_encoder_decoder", "no encoder-decoder", "false"},
    {"cross_attention_hidden_size", "no cross-attention", "null"},
    {"pruned_heads", "no heads pruned", "{}"},
    {"quantization_config", "unquantized weights", "null"},
};
// clang-format on

const KnownKey* known_key(const std::string& key) {
  for (const auto& k : kKnownKeys)
    if (k.key == key) return &k;
  return nullptr;
}

std::string shown_value(const json& v) {
  std::string d = v.dump();
  return d.size() > 60 ? d.substr(0, 57) + "..." : d;
}

}  // namespace

std::vector<std::string> check_config_keys(const Source& s, bool allow_unknown) {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : s.config().items()) {
    if (s.used_key(key)) continue;
    const KnownKey* k = known_key(key);
    if (k == nullptr) {
      unknown.push_back(key + " = " + shown_value(value));
      continue;
    }
    if (k->at_default.empty()) continue;
    const json def = json::parse(k->at_default);
    if (value != def && !(value.is_null() && (def.is_boolean() || def.empty())))
      throw UserError(fmt::format("{}: {} = {} is not supported: {} (only {} is)", s.config_path(),
                                  key, shown_value(value), k->why, k->at_default));
  }
  if (unknown.empty() || allow_unknown) return unknown;
  if (unknown.size() == 1)
    throw UserError(fmt::format(
        "{}: {}: a key ropelab does not know for {}, so it cannot tell whether it changes what "
        "the model computes; HINT: --allow-unknown-keys imports anyway and lists every key it "
        "ignored",
        s.config_path(), unknown.front(), s.architecture()));
  std::string names;
  for (const auto& u : unknown) names += (names.empty() ? "" : ", ") + u;
  throw UserError(fmt::format(
      "{}: {} keys ropelab does not know for {} ({}), so it cannot tell whether they change what "
      "the model computes; HINT: --allow-unknown-keys imports anyway and lists every key it "
      "ignored",
      s.config_path(), unknown.size(), s.architecture(), names));
}

}  // namespace ropelab::hf
