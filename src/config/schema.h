// Typed configuration: every key ropelab understands, with its default, help text and checks.
//
// Each struct lists its fields once, in visit(). The strict YAML reader, the dumper and the
// schema printer (`ropelab config --schema`) are visitors over the same list (config/loader.cpp),
// so a key cannot exist in one place and be forgotten in another. Torch-free on purpose.
#pragma once
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "config/enums.h"
#include "config/experiment.h"
#include "config/position.h"
#include "config/visit.h"

namespace ropelab::config {

// ---------------------------------------------------------------------------------------------

struct AttentionConfig {
  AttentionKernel kernel = AttentionKernel::kSoftmax;
  FeatureMap feature_map = FeatureMap::kElu;
  RopeMode rope_mode = RopeMode::kEq19;
  int64_t num_features = 64;
  double dropout = 0.0;
  bool qk_norm = false;
  QkNormOver qk_norm_over = QkNormOver::kHead;
  bool sinks = false;
  double ssmax = 0.0;
  double scale_dim = 0.0;
  template <class V>
  void visit(V& v) {
    v("kernel", kernel, "softmax, or linear (O(N) kernelised attention)");
    v("feature_map", feature_map, "linear kernel feature map: elu (elu+1) or favor (FAVOR+)");
    v("rope_mode", rope_mode,
      "RoPE with linear attention: eq19 (rotate phi(q),phi(k) in the numerator only, paper Eq. "
      "19) or before_phi (rotate q,k before the feature map, as Performer code)");
    v("num_features", num_features, "random features for favor", between(1, 65536));
    v("dropout", dropout, "dropout on attention probabilities (softmax only)", between(0, 0.99));
    v("qk_norm", qk_norm,
      "RMSNorm over each head's queries and keys (a learned gain per channel), before the "
      "rotation, as Qwen3 and OLMo 2 (softmax only)");
    v("qk_norm_over", qk_norm_over,
      "what QK-norm normalises: head (each head's q and k, one gain of head_dim shared by the "
      "heads: Qwen3) or projection (the whole q and k projections, one gain per channel: OLMo "
      "2)");
    v("sinks", sinks,
      "a learned sink logit per head (GPT-OSS): an extra score in each softmax's denominator "
      "with no value, so a head can attend to nothing (softmax only)");
    v("ssmax", ssmax,
      "Scalable-Softmax (Nakanishi 2025, arXiv:2501.19399): each query is multiplied by "
      "s*log(n), n the keys it can see, s learned per head and starting at this value; 0 = off "
      "(softmax only)",
      between(0, 100));
    v("scale_dim", scale_dim,
      "scores are q.k / sqrt(scale_dim) (Gemma 2 and 3: query_pre_attn_scalar); 0 = the head "
      "width, as Vaswani et al. (softmax only)",
      between(0, 1 << 20));
  }
};

// One kind of layer in a hybrid layout (model.layout): its attention span, its position
// section and its query temperature.
struct QueryTemperatureConfig {  // Llama 4's attention temperature tuning (its NoPE layers)
  double scale = 0.0;
  int64_t floor = 8192;
  template <class V>
  void visit(V& v) {
    v("scale", scale,
      "queries at position p are multiplied by 1 + scale*log(floor((p+1)/floor) + 1) (Llama 4: "
      "0.1 on its NoPE layers); 0 = off",
      between(0, 100));
    v("floor", floor, "the position scale of the temperature (Llama 4: 8192)", at_least(1));
  }
};

struct LayerKindConfig {
  Maybe<int64_t> window;
  Maybe<int64_t> chunk;
  PositionConfig position;
  QueryTemperatureConfig temperature;
  template <class V>
  void visit(V& v) {
    v("window", window,
      "sliding window (Mistral, Gemma): a query sees the `window` nearest keys up to itself "
      "(bidirectional: |query - key| < window); absent = global",
      at_least(1));
    v("chunk", chunk,
      "chunked attention (Llama 4): a query sees only keys of its own block of `chunk` "
      "positions; absent = global",
      at_least(1));
    v("position", position,
      "this kind's position section; absent = model.position (a given section is whole: its "
      "type defaults to rope)");
    v("temperature", temperature, "the query temperature of this kind's layers");
  }
};

// A per-layer layout: layer i of each stack is the kind pattern[i % len(pattern)]. No kinds =
// every layer as model.position and model.attention say (the default).
struct LayoutConfig {
  std::vector<std::string> pattern;
  std::map<std::string, LayerKindConfig> kinds;
  template <class V>
  void visit(V& v) {
    v("pattern", pattern,
      "the kinds of the layers, repeated over each stack's layers (e.g. [local, local, local, "
      "global]); empty with one kind = that kind everywhere");
    v("kinds", kinds,
      "the layer kinds by name (letters, digits, _ and -): window or chunk, position, "
      "temperature");
  }
};

struct ModelConfig {
  Arch arch = Arch::kDecoder;
  int64_t d_model = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t d_ff = 1024;
  int64_t embedding_size = 0;
  int64_t n_decoder_layers = 0;
  double dropout = 0.1;
  Norm norm = Norm::kAuto;
  NormType norm_type = NormType::kLayerNorm;
  double norm_eps = 1e-5;
  Activation activation = Activation::kGelu;
  LinearBias bias = LinearBias::kAll;
  bool tie_embeddings = true;
  bool scale_embeddings = false;
  bool parallel_residual = false;
  double init_std = 0.02;
  PoolerActivation pooler_activation = PoolerActivation::kTanh;
  PositionConfig position;
  AttentionConfig attention;
  LayoutConfig layout;
  template <class V>
  void visit(V& v) {
    v("arch", arch, "encoder (BERT), decoder (GPT), or encdec (Transformer-base)");
    v("d_model", d_model, "model width", between(2, 1 << 16));
    v("n_layers", n_layers, "layers (the encoder's, for encdec)", between(1, 256));
    v("n_heads", n_heads, "attention heads; must divide d_model", between(1, 1024));
    v("n_kv_heads", n_kv_heads,
      "grouped-query attention (Ainslie et al. 2023): key/value heads, each shared by "
      "n_heads/n_kv_heads query heads; must divide n_heads; 0 = n_heads (multi-head)",
      between(0, 1024));
    v("head_dim", head_dim,
      "the width of each attention head (Qwen3, Gemma 3: 128 whatever d_model): q has "
      "n_heads*head_dim channels, k and v n_kv_heads*head_dim, and o_proj maps them back to "
      "d_model; 0 = d_model / n_heads",
      between(0, 1 << 14));
    v("d_ff", d_ff, "feed-forward width", between(1, 1 << 20));
    v("embedding_size", embedding_size,
      "encoders: the width of the token and segment embeddings, their norm and the MLM head's "
      "transform, with a projection to d_model after the embeddings (RoFormer's small "
      "checkpoints, ALBERT); 0 = d_model",
      between(0, 1 << 16));
    v("n_decoder_layers", n_decoder_layers, "decoder layers for encdec; 0 = n_layers",
      between(0, 256));
    v("dropout", dropout, "dropout on embeddings, residual branches and FFN", between(0, 0.99));
    v("norm", norm,
      "layer norm placement: post (BERT, Transformer-base), pre (GPT-2), reordered (OLMo 2: "
      "each sublayer's output normalised before the residual add, x + norm(f(x)), and a final "
      "norm), sandwich (Gemma 2 and 3: both, x + post_norm(f(norm(x))), four norms a layer), or "
      "auto (post for encoder and encdec, pre for decoder)");
    v("norm_type", norm_type,
      "layernorm (with a shift), rmsnorm (Zhang & Sennrich 2019: x / rms(x) * gain, as "
      "Llama), or rmsnorm_offset (x / rms(x) * (1 + gain), the gain starting at 0: Gemma; "
      "QK-norm follows it); the MLM head's transform keeps BERT's LayerNorm");
    v("norm_eps", norm_eps,
      "epsilon of every norm (1e-5 as PyTorch; imported BERT checkpoints bring 1e-12)",
      between(0, 1));
    v("activation", activation,
      "feed-forward activation: gelu (with erf), gelu_tanh (gelu's tanh approximation: GPT-2's "
      "gelu_new), relu, or a gated one (Shazeer 2020): swiglu (fc2(silu(gate(x)) * fc1(x)), as "
      "Llama), geglu (gelu with erf in place of silu) or geglu_tanh (the tanh approximation: "
      "Gemma)");
    v("bias", bias,
      "biases of the attention and feed-forward projections: all, none (Llama), or qkv (only "
      "the query, key and value projections: Qwen2)");
    v("tie_embeddings", tie_embeddings, "share input embeddings with the output projection");
    v("scale_embeddings", scale_embeddings, "multiply embeddings by sqrt(d_model)");
    v("parallel_residual", parallel_residual,
      "pre-norm layers whose attention and feed-forward both read the layer's input, "
      "x + attn(norm1(x)) + ffn(norm2(x)) (GPT-J, GPT-NeoX and Pythia), instead of one after the "
      "other");
    v("init_std", init_std, "std of the normal initialiser", between(0, 10));
    v("pooler_activation", pooler_activation,
      "classification head: the activation of its dense layer on [CLS] (tanh: BERT's pooler; "
      "gelu: RoFormer's classification head)");
    v("position", position, "position module");
    v("attention", attention, "attention kernel");
    v("layout", layout,
      "hybrid layouts: kinds of layers (window or chunk, position, temperature) in a repeating "
      "pattern");
  }
};

// The width of each attention head: model.head_dim, or d_model / n_heads when 0.
inline int64_t head_dim_of(const ModelConfig& m) {
  return m.head_dim > 0 ? m.head_dim : m.d_model / m.n_heads;
}

struct TokenizerConfig {
  TokenizerType type = TokenizerType::kSpm;
  int64_t vocab_size = 8000;
  SpmModelType model_type = SpmModelType::kBpe;
  double character_coverage = 1.0;
  std::string model;
  bool joint = true;
  std::string target_model;
  bool lowercase = true;
  StripAccents strip_accents = StripAccents::kAuto;
  std::string vocab_order;
  double sample_mb = 64;
  template <class V>
  void visit(V& v) {
    v("type", type,
      "spm (SentencePiece), byte (256 bytes + specials), wordpiece (BERT's: a vocab.txt given "
      "as model, e.g. an imported checkpoint's) or bpe (byte-level BPE: a Hugging Face "
      "tokenizer.json given as model: Llama 3, Qwen2, SmolLM); synthetic (the fixed symbol "
      "vocabulary of the synthetic-* sources) is set by those sources themselves");
    v("vocab_size", vocab_size, "SentencePiece vocabulary size", between(32, 1 << 20));
    v("model_type", model_type, "SentencePiece algorithm");
    v("character_coverage", character_coverage, "SentencePiece character coverage",
      between(0.9, 1.0));
    v("model", model,
      "spm: use this existing .model file instead of training one (with joint: false, the "
      "source side's); wordpiece: the vocab.txt; bpe: the tokenizer.json (both required)");
    v("joint", joint,
      "parallel data: one vocabulary learned on both sides, shared by the encoder and the "
      "decoder (the default), or false: one vocabulary of vocab_size per side, with separate "
      "source embeddings");
    v("target_model", target_model,
      "with joint: false, an existing .model file for the target side (give model too)");
    v("lowercase", lowercase, "wordpiece: lowercase the text first (uncased models)");
    v("strip_accents", strip_accents,
      "wordpiece: drop combining marks after NFD; auto: when lowercase (as BERT)");
    v("vocab_order", vocab_order,
      "spm or bpe with a vocabulary ropelab did not make (an imported checkpoint's): a JSON "
      "list, ropelab id r -> the tokenizer's id, that puts its specials at ropelab's ids "
      "(import-hf writes RUN/hf/vocab_order.json); empty: the ids are ropelab's own");
    v("sample_mb", sample_mb,
      "spm: SentencePiece learns from the first this many MB of the training text (its memory "
      "grows with the sample, not the corpus)",
      between(0.001, 1e6));
  }
};

// A labelled TSV whose layout the config describes (data.source glue without a GLUE task): the
// header names of its columns. Files: train.tsv, dev.tsv and optionally test.tsv in data.train.
struct TsvLayoutConfig {
  std::string name = "custom";
  std::string a, b, c, label;
  std::vector<std::string> labels;
  bool regression = false;
  template <class V>
  void visit(V& v) {
    v("name", name, "the task's name (its prediction file is NAME.tsv)");
    v("a", a, "header name of the first text's column (set to describe a layout)");
    v("b", b, "header name of the second text's column (sentence pairs); empty: single texts");
    v("c", c,
      "ranking (task.type rank): header name of the third text's column; the label says "
      "whether b or c is closer to a");
    v("label", label, "header name of the label column; test files may lack it");
    v("labels", labels,
      "class names as written in the label column (class index = position); ranking: the "
      "names meaning 'b is closer' and 'c is closer', e.g. [B, C]");
    v("regression", regression, "the label is a number (squared-error loss, Pearson/Spearman)");
  }
};

// The synthetic-* sources (data/synthetic.h): generated from `seed`, no download. `size` is a
// task's instance size: symbols to copy or reverse, digits per addend, key-value pairs (mqar),
// input positions (selective copy), letters (counting), instructions (flip-flop), or the whole
// prompt in tokens (passkey, niah, niah-multikey, vt). Training examples draw sizes in
// [min_size, size].
struct SyntheticConfig {
  int64_t size = 16;
  int64_t min_size = 0;
  int64_t train_examples = 20000;
  int64_t valid_examples = 256;
  int64_t test_examples = 256;
  int64_t seed = 1;
  template <class V>
  void visit(V& v) {
    v("size", size,
      "largest training instance: symbols (copy, reverse), digits per addend (addition), "
      "key-value pairs (mqar), input positions (selective-copy), letters (counting), "
      "instructions (flipflop), prompt tokens (passkey, niah, niah-multikey, vt)",
      between(1, 1 << 20));
    v("min_size", min_size, "smallest training instance; 0 = the task's smallest",
      between(0, 1 << 20));
    v("train_examples", train_examples, "training examples generated", between(1, 1e8));
    v("valid_examples", valid_examples, "validation examples generated", between(1, 1e8));
    v("test_examples", test_examples, "test examples generated", between(1, 1e8));
    v("seed", seed, "generator seed (the data; run.seed orders it)", at_least(0));
  }
};

struct DataConfig {
  DataSource source = DataSource::kBibleEn;
  std::string train;
  std::string valid;
  std::string test;
  std::string source_suffix = "en";
  std::string target_suffix = "es";
  std::string glue_task;
  TsvLayoutConfig tsv;
  SyntheticConfig synthetic;
  std::string prepared_dir = "data/prepared";
  std::string document_separator;
  TextFormat format = TextFormat::kAuto;
  std::string text_field = "text";
  TokenizerConfig tokenizer;
  template <class V>
  void visit(V& v) {
    v("source", source,
      "built-in corpus (bible-en: KJV+WEB, one chapter per document; bible-en-books: the same "
      "text, one book per document (long documents); bible-en-es: WEB/RV1909 "
      "verse pairs; bible-mrpc, bible-sst2, bible-cola: GLUE-style tasks; bible-rank: long-text "
      "ranking) or your data: text (one document per line), bytes (raw files, enwik8-style), "
      "parallel (two aligned files), glue (a GLUE task directory, or a TSV layout data.tsv "
      "describes); or generated probes (task answer): synthetic-passkey, synthetic-mqar "
      "(multi-query associative recall), synthetic-copy, synthetic-reverse, synthetic-addition, "
      "synthetic-selective-copy, synthetic-counting, synthetic-flipflop, synthetic-niah, "
      "synthetic-niah-multikey (RULER's needles), synthetic-vt (RULER's variable tracking), "
      "synthetic-grid (a 2-D grid: the cell below a marker)");
    v("train", train,
      "user data: training file (parallel: the path without the language suffix, e.g. "
      "wmt/train for wmt/train.en + wmt/train.de) or, for glue, the task directory; text and "
      "bytes: also a directory of shards or a glob ('web/train-*.jsonl.zst'), read in name "
      "order; gzip and zstd files are decompressed as they are read");
    v("valid", valid, "user data: validation file, directory or glob (unused for glue)");
    v("test", test, "user data: test file, directory or glob (unused for glue)");
    v("source_suffix", source_suffix, "parallel: suffix of source-side files (e.g. en)");
    v("target_suffix", target_suffix, "parallel: suffix of target-side files (e.g. de)");
    v("glue_task", glue_task,
      "glue: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE or WNLI (the bible-* sources "
      "set it themselves); empty with data.tsv for a described layout");
    v("tsv", tsv, "glue: a TSV layout of your own (columns by header name)");
    v("synthetic", synthetic, "synthetic-* sources: instance sizes, example counts, seed");
    v("prepared_dir", prepared_dir, "where prepared HDF5 datasets and tokenizers are cached");
    v("document_separator", document_separator,
      "text: a line equal to this ends a document, whose lines are joined by newlines (long "
      "documents, e.g. '<|endoftext|>' or '---'); empty = one document per line");
    v("format", format,
      "text: how the files hold documents: text (lines), jsonl (a JSON object per line, the "
      "document in data.text_field, as Hugging Face datasets export), or auto (jsonl for "
      ".jsonl/.ndjson/.json files, also when .gz/.zst compressed)");
    v("text_field", text_field, "jsonl: the field holding each document's text");
    v("tokenizer", tokenizer, "tokenizer");
  }
};

// Tasks: one struct per kind, chosen by `task.type`. Traits say which architecture and which
// kind of data each needs (checked at load time).
// How the language-model tasks pack a split's documents into their windows.
inline constexpr const char* kPackingHelp =
    "joined: the documents are concatenated (with a separator) and cut into windows that "
    "cross their boundaries; documents: the same windows, but a token attends only to its own "
    "document and positions restart at each document (torchtitan's and OLMo-core's document "
    "masking)";

struct ClmTaskConfig {  // causal LM: next-token cross-entropy
  static constexpr const char* kName = "clm";
  static constexpr Arch kArch = Arch::kDecoder;
  static constexpr DataKind kData = DataKind::kLm;
  Packing packing = Packing::kJoined;
  template <class V>
  void visit(V& v) {
    v("packing", packing, kPackingHelp);
  }
};

struct MlmTaskConfig {  // BERT's masked LM
  static constexpr const char* kName = "mlm";
  static constexpr Arch kArch = Arch::kEncoder;
  static constexpr DataKind kData = DataKind::kLm;
  double mask_prob = 0.15;
  double mask_token_frac = 0.8;
  double random_token_frac = 0.1;
  Packing packing = Packing::kJoined;
  template <class V>
  void visit(V& v) {
    v("mask_prob", mask_prob, "fraction of non-special tokens selected", between(0.01, 1));
    v("mask_token_frac", mask_token_frac, "of the selected, fraction set to [MASK]", between(0, 1));
    v("random_token_frac", random_token_frac, "of the selected, fraction set to a random token",
      between(0, 1));
    v("packing", packing, kPackingHelp);
  }
};

enum class BestBy { kLoss, kBleu };
ROPELAB_ENUM_NAMES(BestBy, "loss", "bleu");

struct TranslationTaskConfig {  // encoder-decoder on sentence pairs (Vaswani et al. 2017)
  static constexpr const char* kName = "translation";
  static constexpr Arch kArch = Arch::kEncDec;
  static constexpr DataKind kData = DataKind::kParallel;
  int64_t max_tokens = 0;
  int64_t beam = 4;
  double lenpen = 0.6;
  double max_len_a = 1.2;
  int64_t max_len_b = 10;
  int64_t valid_bleu_sentences = 200;
  BestBy best_by = BestBy::kBleu;
  template <class V>
  void visit(V& v) {
    v("max_tokens", max_tokens,
      "tokens per batch (source or target side, padding included), pairs grouped by length; "
      "0 = train.batch_size * task.seq_len",
      at_least(0));
    v("beam", beam, "beam size for test decoding (`ropelab eval`, `translate` default)",
      between(1, 64));
    v("lenpen", lenpen, "length penalty: hypothesis score / length^lenpen (fairseq)",
      between(0, 10));
    v("max_len_a", max_len_a, "output length limit a * source length + b: a", between(0, 100));
    v("max_len_b", max_len_b, "output length limit a * source length + b: b", between(0, 10000));
    v("valid_bleu_sentences", valid_bleu_sentences,
      "validation: greedy-decode the first N sentences and log bleu and chrf; 0 = off",
      at_least(0));
    v("best_by", best_by, "metric that picks the best checkpoint: bleu (validation BLEU) or loss");
  }
};

struct GlueTaskConfig {  // GLUE-style classification / regression on [CLS] (tasks/glue.h)
  static constexpr const char* kName = "glue";
  static constexpr Arch kArch = Arch::kEncoder;
  static constexpr DataKind kData = DataKind::kGlue;
  template <class V>
  void visit(V&) {}
};

struct RankTaskConfig {  // (A, B, C): is B closer to A than C is? (tasks/rank.h)
  static constexpr const char* kName = "rank";
  static constexpr Arch kArch = Arch::kEncoder;
  static constexpr DataKind kData = DataKind::kGlue;
  template <class V>
  void visit(V&) {}
};

// Causal LM over a synthetic example, trained and scored on its answer tokens only
// (tasks/lm.h): metrics loss, acc (answer tokens) and exact (whole answers right).
struct AnswerTaskConfig {
  static constexpr const char* kName = "answer";
  static constexpr Arch kArch = Arch::kDecoder;
  static constexpr DataKind kData = DataKind::kSynthetic;
  template <class V>
  void visit(V&) {}
};

using TaskVariant = std::variant<ClmTaskConfig, MlmTaskConfig, TranslationTaskConfig,
                                 GlueTaskConfig, RankTaskConfig, AnswerTaskConfig>;

struct TaskConfig {
  TaskVariant opts = ClmTaskConfig{};
  int64_t seq_len = 128;
  double label_smoothing = 0.0;
  std::string init_from;
  const char* type() const { return variant_name(opts); }
  template <class V>
  void visit(V& v) {
    visit_variant(
        v, opts,
        "clm (causal LM), mlm (masked LM), translation, glue, rank (long-text pair ranking), "
        "answer (synthetic-* probes: loss and exact match on the answer)",
        true);
    v("seq_len", seq_len, "training sequence length in tokens", between(2, 1 << 20));
    v("label_smoothing", label_smoothing, "label smoothing of the cross-entropy", between(0, 0.99));
    v("init_from", init_from,
      "start from a pretrained backbone: a run directory (its best checkpoint, else its newest) "
      "or an exported weights.h5. Loaded strictly by name; the model section must match it, "
      "except model.position and model.layout changes that add no parameters (the base, the "
      "scaling, the rotary width, NoPE layers, layout kinds and spans, no positions: recorded in "
      "RUN/init_from.json). Its tokenizer is used unless data.tokenizer.model is set. Empty: "
      "from scratch");
  }
};

struct ScheduleConfig {
  ScheduleType type = ScheduleType::kCosine;
  int64_t warmup = 100;
  double min_lr_ratio = 0.1;
  double init_lr = 1e-7;
  template <class V>
  void visit(V& v) {
    v("type", type,
      "constant, linear (warmup then linear decay), cosine (warmup then cosine), inverse_sqrt "
      "(fairseq), noam (Vaswani)");
    v("warmup", warmup, "warm-up steps", at_least(0));
    v("min_lr_ratio", min_lr_ratio, "final lr / peak lr for linear and cosine", between(0, 1));
    v("init_lr", init_lr, "lr at step 0 of the warm-up (inverse_sqrt)", at_least(0));
  }
};

struct TrainConfig {
  OptimizerType optimizer = OptimizerType::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-8;
  double weight_decay = 0.01;
  ScheduleConfig schedule;
  int64_t max_steps = 1000;
  int64_t batch_size = 16;
  int64_t grad_accum = 1;
  double clip = 1.0;
  Precision precision = Precision::kFp32;
  int64_t eval_every = 100;
  int64_t eval_batches = 20;
  int64_t checkpoint_every = 500;
  int64_t keep_last = 2;
  int64_t log_every = 10;
  int64_t max_bad_steps = 5;
  int64_t context_parallel = 1;
  template <class V>
  void visit(V& v) {
    v("optimizer", optimizer, "adamw (decoupled decay, no decay on norms/biases) or adam");
    v("lr", lr, "peak learning rate", between(0, 10));
    v("beta1", beta1, "Adam beta1", between(0, 0.999999));
    v("beta2", beta2, "Adam beta2", between(0, 0.999999999));
    v("eps", eps, "Adam epsilon", between(0, 1));
    v("weight_decay", weight_decay, "AdamW decoupled weight decay", between(0, 10));
    v("schedule", schedule, "learning-rate schedule (a pure function of the step)");
    v("max_steps", max_steps, "optimizer steps", between(1, 1e12));
    v("batch_size", batch_size, "sequences per micro-batch", between(1, 1 << 20));
    v("grad_accum", grad_accum, "micro-batches per optimizer step", between(1, 1 << 16));
    v("clip", clip, "max global grad norm; 0 = off", at_least(0));
    v("precision", precision, "fp32, or bf16 autocast (tables and losses stay fp32)");
    v("eval_every", eval_every, "validate every N steps (and at the end); 0 = only at the end",
      at_least(0));
    v("eval_batches", eval_batches, "validation batches per evaluation; 0 = the whole split",
      at_least(0));
    v("checkpoint_every", checkpoint_every, "checkpoint every N steps (and at the end)",
      at_least(0));
    v("keep_last", keep_last, "checkpoints kept besides the best", between(1, 1000));
    v("log_every", log_every, "log training metrics every N steps", between(1, 1e9));
    v("max_bad_steps", max_bad_steps, "stop after this many consecutive non-finite steps",
      between(1, 1e6));
    v("context_parallel", context_parallel,
      "ranks that split each sequence (ring attention; docs/distributed.md): the world's ranks "
      "form data-parallel groups of this many consecutive ranks; 1 = off",
      between(1, 4096));
  }
};

struct RunConfig {
  std::string name = "run";
  std::string out_dir = "runs";
  int64_t seed = 1234;
  int64_t threads = 0;
  std::string device = "auto";
  bool deterministic = false;
  bool tensorboard = true;
  bool share_cpus = true;
  template <class V>
  void visit(V& v) {
    v("name", name, "run name; outputs go to out_dir/name");
    v("out_dir", out_dir, "parent directory of run directories");
    v("seed", seed, "seed for initialisation, data order and masking", between(0, 1e15));
    v("threads", threads,
      "intra-op threads; 0 = the CPUs this process may use (its affinity mask and cgroup CPU "
      "quota) divided by the ranks on this machine",
      between(0, 1024));
    v("device", device,
      "auto (the first CUDA GPU if libtorch has one, else cpu), cpu, cuda, cuda:N");
    v("deterministic", deterministic,
      "bit-reproducible GPU runs: libtorch's deterministic algorithms, a fixed cuBLAS workspace "
      "and the unfused attention (slower); the CPU path is deterministic either way at a fixed "
      "thread count (see share_cpus)");
    v("tensorboard", tensorboard,
      "write TensorBoard event files to out_dir/name/tensorboard (metrics, config, hparams, "
      "evaluation and probe results); `ropelab export-tensorboard` writes them for runs that "
      "have none");
    v("share_cpus", share_cpus,
      "while other processes keep some of this process's CPUs busy, train on the CPUs left (fewer "
      "threads, checked about once a second between steps) and go back to run.threads when they "
      "are free: two trainings on the same cores then each keep about their share instead of "
      "collapsing under OpenMP's spinning (BENCHMARKS.md). false keeps the thread count fixed, "
      "as bit-identical repeats of a run on a busy machine need");
  }
};

// The whole configuration of one training run.
struct Config {
  RunConfig run;
  DataConfig data;
  ModelConfig model;
  TaskConfig task;
  TrainConfig train;
  template <class V>
  void visit(V& v) {
    v("run", run, "run name, output place, seed, threads, device");
    v("data", data, "corpus and tokenizer");
    v("model", model, "architecture and position module");
    v("task", task, "training objective");
    v("train", train, "optimisation");
  }
};

}  // namespace ropelab::config
