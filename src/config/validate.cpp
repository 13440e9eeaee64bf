// The validation that spans several sections of a config (load_config runs it after reading):
// heads against widths, each position section against the model (the families' traits here,
// their own checks beside their structs in config/position.h), the task against the
// architecture and the data, the tokenizer, packing, the run's device and name.
#include <algorithm>
#include <cctype>
#include <string>
#include <variant>
#include <vector>

#include "config/layout.h"
#include "config/loader.h"

namespace ropelab::config {

bool valid_device(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5) return false;
  return std::all_of(d.begin() + 5, d.end(),
                     [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
}

namespace {

// The problems validate() finds: bad(key, message), or a combination this model cannot run.
struct ProblemList {
  mutable std::vector<Problem> list;  // the families' checks report through a const reference
  void operator()(const std::string& key, const std::string& msg) const {
    list.push_back(Problem{Loc{}, key, msg});
  }
  void not_applicable(const std::string& key, const std::string& msg) const {
    list.push_back(Problem{Loc{}, key, msg, /*not_applicable=*/true});
  }
};

// What each position family needs of the model: its traits (where it acts), then its own
// checks (PositionConfig::check). `position` is model.position or a layout kind's, sec its key.
void check_positions(const Config& c, const PositionConfig& position, const std::string& sec,
                     int64_t head_dim, const ProblemList& bad) {
  const auto& m = c.model;
  const bool linear = m.attention.kernel == AttentionKernel::kLinear;
  std::visit(
      [&](const auto& pos) {
        using P = std::decay_t<decltype(pos)>;
        if (P::kBiasesScores && linear)
          bad(sec + ".type", std::string(P::kName) +
                                 " adds a bias to attention scores, which linear "
                                 "attention never forms; use softmax attention or "
                                 "another position module");
        if (P::kSoftmaxOnly && linear)
          bad(sec + ".type", std::string(P::kName) +
                                 " needs softmax attention (linear attention's "
                                 "feature maps cannot carry its transform of q and "
                                 "k); use softmax attention or another position "
                                 "module");
        if (!P::kTileable && c.train.context_parallel > 1)
          bad(sec + ".type", std::string(P::kName) +
                                 " builds a stored T x S score bias, which ring attention "
                                 "cannot split over ranks; use train.context_parallel=1 or "
                                 "another position module");
        if (P::kCausalOnly && m.arch != Arch::kDecoder)
          bad(sec + ".type",
              std::string(P::kName) +
                  " is defined for causal self-attention (it counts or gates from each key up "
                  "to its query); use model.arch=decoder or another position module");
      },
      position.opts);
  PositionCheck pc;
  pc.sec = sec;
  pc.head_dim = head_dim;
  pc.seq_len = c.task.seq_len;
  pc.layers = std::max(m.n_layers, m.arch == Arch::kEncDec ? m.n_decoder_layers : 0);
  pc.decoder = m.arch == Arch::kDecoder;
  pc.linear = linear;
  pc.context_parallel = c.train.context_parallel;
  if (linear && m.attention.rope_mode == RopeMode::kEq19)
    pc.feature_width =
        m.attention.feature_map == FeatureMap::kFavor ? m.attention.num_features : head_dim;
  pc.bad = [&bad](const std::string& key, const std::string& msg) { bad(key, msg); };
  pc.not_applicable = [&bad](const std::string& key, const std::string& msg) {
    bad.not_applicable(key, msg);
  };
  position.check(pc);
}

// The task against the architecture and the data, and the schedule against the steps.
void check_task(const Config& c, ProblemList& bad) {
  const auto& m = c.model;
  std::visit(
      [&](const auto& task) {
        using T = std::decay_t<decltype(task)>;
        if (m.arch != T::kArch)
          bad("model.arch", std::string("task ") + T::kName + " needs arch " + to_string(T::kArch) +
                                " (got " + to_string(m.arch) + ")");
        DataKind kind = kind_of(c.data.source);
        if (kind != T::kData)
          bad("data.source", std::string("task ") + T::kName + " needs " + to_string(T::kData) +
                                 " data; data.source '" + to_string(c.data.source) + "' gives " +
                                 to_string(kind) + " data");
        if constexpr (std::is_same_v<T, TranslationTaskConfig>) {
          if (task.best_by == BestBy::kBleu && task.valid_bleu_sentences == 0)
            bad("task.best_by", "best_by bleu needs task.valid_bleu_sentences > 0");
        }
        if constexpr (std::is_same_v<T, MlmTaskConfig>) {
          if (task.mask_token_frac + task.random_token_frac > 1.0 + 1e-9)
            bad("task.random_token_frac", "mask_token_frac + random_token_frac must be <= 1");
        }
      },
      c.task.opts);
  if (c.train.schedule.warmup > c.train.max_steps &&
      c.train.schedule.type != ScheduleType::kConstant)
    bad("train.schedule.warmup", "warmup (" + std::to_string(c.train.schedule.warmup) +
                                     ") is longer than max_steps (" +
                                     std::to_string(c.train.max_steps) + ")");
}

// A described TSV layout (data.tsv), and ranking data against the rank task.
void check_tsv(const Config& c, ProblemList& bad) {
  const DataSource src = c.data.source;
  const TsvLayoutConfig& tsv = c.data.tsv;
  const bool described = !tsv.a.empty();
  if (src == DataSource::kGlue && c.data.glue_task.empty() && !described)
    bad("data.glue_task",
        "data.source glue needs data.glue_task (e.g. MRPC) or a layout in data.tsv");
  if (described && src != DataSource::kGlue)
    bad("data.tsv.a", "a described TSV layout needs data.source glue");
  if (described && !c.data.glue_task.empty())
    bad("data.glue_task", "give data.glue_task or a layout in data.tsv, not both");
  if (!described && (!tsv.b.empty() || !tsv.c.empty() || !tsv.label.empty()))
    bad("data.tsv.a", "a described TSV layout needs data.tsv.a (the first text's column)");
  if (described && tsv.label.empty()) bad("data.tsv.label", "name the label column");
  if (described && tsv.regression == !tsv.labels.empty())
    bad("data.tsv.labels", "give the class names (labels) or regression: true, not both");
  if (described && !tsv.c.empty() && (tsv.b.empty() || tsv.labels.size() != 2 || tsv.regression))
    bad("data.tsv.c",
        "a ranking layout needs columns a, b and c and two labels (b closer, c closer)");
  if (described && (tsv.name.empty() || tsv.name.find_first_of("/\\") != std::string::npos))
    bad("data.tsv.name", "the name must be non-empty and contain no path separator");
  {
    const bool ranking = src == DataSource::kBibleRank || (described && !tsv.c.empty());
    const bool rank_task = std::holds_alternative<RankTaskConfig>(c.task.opts);
    if (kind_of(src) == DataKind::kGlue && ranking != rank_task)
      bad("task.type", rank_task ? "task rank needs ranking data (data.source bible-rank, or a "
                                   "data.tsv layout with a c column)"
                                 : "ranking data (a, b, c) needs task.type rank");
  }
}

// The tokenizer against the data, and the run's device and name.
void check_tokenizer_and_run(const Config& c, ProblemList& bad) {
  const DataSource src = c.data.source;
  if (src == DataSource::kBytes && c.data.tokenizer.type != TokenizerType::kByte)
    bad("data.tokenizer.type", "data.source bytes needs the byte tokenizer");
  const TokenizerConfig& tk = c.data.tokenizer;
  if (!tk.joint && kind_of(src) != DataKind::kParallel)
    bad("data.tokenizer.joint", "separate vocabularies (joint: false) need parallel data");
  if (!tk.joint && tk.type != TokenizerType::kSpm)
    bad("data.tokenizer.joint", "separate vocabularies (joint: false) need the spm tokenizer");
  if (tk.joint && !tk.target_model.empty())
    bad("data.tokenizer.target_model", "target_model needs joint: false");
  if (!tk.joint && tk.model.empty() != tk.target_model.empty())
    bad(tk.model.empty() ? "data.tokenizer.model" : "data.tokenizer.target_model",
        "with joint: false, give both model (source side) and target_model, or neither");
  // The synthetic sources' size bounds are the generator's: data::plan() checks them.
  if (tk.type == TokenizerType::kWordPiece && tk.model.empty())
    bad("data.tokenizer.model", "the wordpiece tokenizer needs its vocab.txt as model");
  if (tk.type == TokenizerType::kBpe && tk.model.empty())
    bad("data.tokenizer.model", "the bpe tokenizer needs its tokenizer.json as model");
  if (!tk.vocab_order.empty() && tk.type != TokenizerType::kSpm && tk.type != TokenizerType::kBpe)
    bad("data.tokenizer.vocab_order", "a vocabulary order is for the spm and bpe tokenizers");
  if (!tk.vocab_order.empty() && tk.type == TokenizerType::kSpm && tk.model.empty())
    bad("data.tokenizer.vocab_order", "re-numbering needs an existing SentencePiece model");
  if (kind_of(src) != DataKind::kSynthetic && tk.type == TokenizerType::kSynthetic) {
    bad("data.tokenizer.type", "the synthetic vocabulary is for the synthetic-* sources");
  }
  if (!c.data.document_separator.empty() && src != DataSource::kText)
    bad("data.document_separator",
        std::string("separates documents of data.source text, not '") + to_string(src) + "'");
  if (!is_builtin(src) && kind_of(src) != DataKind::kSynthetic && c.data.train.empty())
    bad("data.train", std::string("data.source '") + to_string(src) + "' needs data.train");
  if (!valid_device(c.run.device))
    bad("run.device", "'" + c.run.device + "' is not a device (auto, cpu, cuda or cuda:N)");
  if (c.run.name.empty() || c.run.name.find('/') != std::string::npos)
    bad("run.name", "must be non-empty and contain no '/'");
}

// Per-document positions (task.packing documents): relative families need nothing, absolute
// input-side ones are re-indexed; a family that reads absolute positions inside attention
// (FIRE, M-RoPE on a grid) would change with restarting.
void check_packing(const Config& c, ProblemList& bad) {
  bool documents = false;
  std::visit(
      [&](const auto& t) {
        if constexpr (std::is_same_v<std::decay_t<decltype(t)>, ClmTaskConfig> ||
                      std::is_same_v<std::decay_t<decltype(t)>, MlmTaskConfig>)
          documents = t.packing == Packing::kDocuments;
      },
      c.task.opts);
  if (!documents) return;
  std::vector<const PositionConfig*> positions{&c.model.position};
  for (const auto& [name, kind] : c.model.layout.kinds) positions.push_back(&kind.position);
  for (const auto* p : positions) {
    if (p->reads_absolute_positions()) {
      bad("task.packing", std::string(p->type()) +
                              " reads each query's absolute position inside attention; "
                              "per-document positions are not implemented for it (use "
                              "task.packing=joined)");
      return;
    }
  }
}

// Context parallelism: ring attention splits the sequences of clm and mlm (config/schema.h,
// train.context_parallel); what it cannot split is refused here (the families: check_positions).
void check_context_parallel(const Config& c, ProblemList& bad) {
  const int64_t n = c.train.context_parallel;
  if (n <= 1) return;
  const bool lm = std::holds_alternative<ClmTaskConfig>(c.task.opts) ||
                  std::holds_alternative<MlmTaskConfig>(c.task.opts);
  const std::string key = "train.context_parallel";
  if (!lm)
    bad(key, std::string("context parallelism splits the sequences of clm and mlm, not task ") +
                 c.task.type());
  if (c.model.attention.kernel == AttentionKernel::kLinear)
    bad(key,
        "linear attention's running sums do not travel the ring (only softmax attention "
        "splits over ranks); use model.attention.kernel=softmax or context_parallel=1");
  if (c.model.attention.dropout > 0)
    bad(key,
        "ring attention computes each block with the tiled kernel, which has no dropout on "
        "attention probabilities; set model.attention.dropout=0");
  if (c.task.seq_len % (2 * n) != 0)
    bad(key, "a sequence is split into 2 x " + std::to_string(n) + " equal pieces; task.seq_len (" +
                 std::to_string(c.task.seq_len) + ") must be a multiple of " +
                 std::to_string(2 * n));
}

}  // namespace

std::vector<Problem> validate(const Config& c) {
  ProblemList bad;
  const auto& m = c.model;
  if (m.head_dim == 0 && m.d_model % m.n_heads != 0) {
    bad("model.n_heads", "n_heads (" + std::to_string(m.n_heads) + ") must divide d_model (" +
                             std::to_string(m.d_model) + ")");
    return bad.list;  // the head dimension is meaningless: checks below would only add noise
  }
  if (m.embedding_size > 0 && m.embedding_size != m.d_model) {
    if (m.arch != Arch::kEncoder)
      bad("model.embedding_size", "an embedding width other than d_model is for encoders");
    else if (m.position.adds_to_input())
      bad("model.embedding_size", std::string("position ") + m.position.type() +
                                      " adds d_model-wide vectors to the embeddings; use a "
                                      "position module inside attention (rope, t5, ...)");
  }
  if (m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads != 0)
    bad("model.n_kv_heads", "n_kv_heads (" + std::to_string(m.n_kv_heads) +
                                ") must divide n_heads (" + std::to_string(m.n_heads) + ")");
  if (m.parallel_residual) {
    if (m.arch == Arch::kEncDec)
      bad("model.parallel_residual",
          "a parallel residual is for decoders and encoders (an encdec decoder's cross-attention "
          "has no place in it)");
    else if (!(m.norm == Norm::kPre || (m.norm == Norm::kAuto && m.arch == Arch::kDecoder)))
      bad("model.parallel_residual",
          std::string("a parallel residual is a pre-norm layout (model.norm pre), not ") +
              (m.norm == Norm::kAuto ? "post (auto for an encoder)" : to_string(m.norm)));
  }
  const int64_t head_dim = head_dim_of(m);
  check_positions(c, m.position, "model.position", head_dim, bad);
  check_packing(c, bad);
  for (const auto& [key, message] : layout_problems(m)) bad(key, message);
  for (const auto& [name, kind] : m.layout.kinds)
    check_positions(c, kind.position, "model.layout.kinds." + name + ".position", head_dim, bad);
  if (m.attention.kernel == AttentionKernel::kLinear) {
    const char* what = m.attention.sinks           ? "sinks"
                       : m.attention.qk_norm       ? "qk_norm"
                       : m.attention.ssmax > 0     ? "ssmax"
                       : m.attention.scale_dim > 0 ? "scale_dim"
                                                   : nullptr;
    if (what != nullptr)
      bad(std::string("model.attention.") + what,
          std::string(what) +
              " is a switch of softmax attention; linear attention has no "
              "softmax (use model.attention.kernel=softmax)");
  }
  check_task(c, bad);
  check_context_parallel(c, bad);
  check_tsv(c, bad);
  check_tokenizer_and_run(c, bad);
  return bad.list;
}

}  // namespace ropelab::config
