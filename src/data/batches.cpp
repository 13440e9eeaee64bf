#include "data/batches.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "dist/context.h"
#include "tokenizers/tokenizer.h"
#include "util/error.h"

namespace ropelab::data {

using tokenizers::Special;

Batch Batch::to(torch::Device dev) const {
  Batch b = *this;
  for (torch::Tensor* t : {&b.input_BT, &b.target_BT, &b.pad_BT, &b.segment_BT, &b.label_B,
                           &b.src_BS, &b.src_pad_BS, &b.doc_BT, &b.scored_N})
    if (t->defined()) *t = t->to(dev);
  return b;
}

torch::Tensor scored_positions(const torch::Tensor& target_BT) {
  return (target_BT != -100).reshape({-1}).nonzero().squeeze(1);
}

namespace {

// A tiny counter-based generator: independent of libstdc++'s distributions, so the same seed
// gives the same data on every platform.
class Rng {
 public:
  explicit Rng(uint64_t key) : state_(mix64(key)) {}
  uint64_t next() { return mix64(state_++); }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

uint64_t key_of(uint64_t seed, int64_t epoch, int64_t index, uint64_t salt) {
  return mix64(mix64(mix64(seed ^ salt) + static_cast<uint64_t>(epoch)) +
               static_cast<uint64_t>(index));
}

// Indices this rank sees in an epoch: a seeded permutation (or identity), every world-th.
std::vector<int64_t> rank_order(int64_t n, const StreamOptions& o, int64_t epoch, uint64_t salt) {
  std::vector<int64_t> all = o.shuffle ? permutation(n, key_of(o.seed, epoch, 0, salt)) : [&] {
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = i;
    return v;
  }();
  if (o.world == 1) return all;  // no second copy (a corpus of 500M tokens: 2M windows)
  std::vector<int64_t> mine;
  mine.reserve(n / o.world + 1);
  for (int64_t i = o.rank; i < n; i += o.world) mine.push_back(all[i]);
  return mine;
}

// Training: full batches only, and the same number on every rank (each step all ranks take
// their part of the same world * batch_size items). Evaluation: every item, the last batch
// partial; ranks may differ by one batch (their results are summed).
int64_t num_batches(int64_t items, const StreamOptions& o) {
  if (o.shuffle) return items / (static_cast<int64_t>(o.world) * o.batch_size);
  int64_t per_rank = items / o.world + (o.rank < items % o.world ? 1 : 0);
  return (per_rank + o.batch_size - 1) / o.batch_size;
}

// The token stream of an LM dataset, documents with `sep` after each, read window by window
// (a split on disk is never loaded whole). Document i's tokens are at stream positions
// [start(i) + i, start(i + 1) + i), its separator right after them; the separator belongs to
// the next document (a causal LM's EOS starts it, as a BOS would) or to its own (MLM's SEP
// closes it).
class JoinedText {
 public:
  JoinedText(Documents d, int32_t sep, bool sep_starts_next)
      : d_(std::move(d)), sep_(sep), sep_starts_next_(sep_starts_next) {}
  int64_t size() const { return d_.num_tokens() + d_.size(); }
  // Positions [from, from + n): their tokens, and (if `doc`) their documents.
  void read(int64_t from, int64_t n, int32_t* tok, int64_t* doc) const {
    int64_t i = doc_at(from), pos = from;
    while (n > 0) {
      const int64_t first = d_.start(i), begin = first + i, end = d_.start(i + 1) + i;
      if (pos < end) {
        const int64_t k = std::min(end - pos, n);
        d_.read(first + (pos - begin), k, tok);
        if (doc) std::fill_n(doc, k, i);
        tok += k, pos += k, n -= k;
        if (doc) doc += k;
        continue;
      }
      *tok++ = sep_;  // pos == end: the separator after document i
      if (doc) *doc++ = sep_starts_next_ ? i + 1 : i;
      ++pos, --n, ++i;
    }
  }

 private:
  // The document at stream position p: the last i with start(i) + i <= p.
  int64_t doc_at(int64_t p) const {
    int64_t lo = 0, hi = d_.size() - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (d_.start(mid) + mid <= p)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
  Documents d_;
  int32_t sep_;
  bool sep_starts_next_;
};

// The split's sequences of the kind a task reads (UserError naming both otherwise).
template <class View>
const View& split_of(const TokenDataset& ds, DataKind kind, const char* task) {
  if (ds.kind() != kind)
    throw UserError(std::string("task ") + task + " needs a '" + config::to_string(kind) +
                    "' dataset, got '" + config::to_string(ds.kind()) + "'");
  return std::get<View>(ds.seqs);
}

// Rows [first, first + count) of the epoch order form batch `index`.
std::pair<int64_t, int64_t> batch_rows(const std::vector<int64_t>& order, int64_t index,
                                       int64_t batch_size) {
  int64_t first = index * batch_size;
  int64_t count = std::min<int64_t>(batch_size, static_cast<int64_t>(order.size()) - first);
  if (count <= 0)
    throw std::out_of_range("batch index " + std::to_string(index) + " is past the epoch");
  return {first, count};
}

// Caches the epoch order: computing a permutation per batch would be wasteful.
class OrderCache {
 public:
  const std::vector<int64_t>& get(int64_t n, const StreamOptions& o, int64_t epoch,
                                  uint64_t salt) const {
    if (epoch != epoch_ || order_.empty()) {
      order_ = rank_order(n, o, epoch, salt);
      epoch_ = epoch;
    }
    return order_;
  }

 private:
  mutable std::vector<int64_t> order_;
  mutable int64_t epoch_ = -1;
};

// Streams whose epoch is an order of n items (windows, examples), every world-th for this rank,
// cut into batches of batch_size: a subclass turns the items of a batch into tensors.
class ItemStream : public BatchStream {
 public:
  int64_t batches_per_epoch() const final { return num_batches(n_, o_); }
  Batch batch(int64_t epoch, int64_t index) const final {
    const auto& order = cache_.get(n_, o_, epoch, salt_);
    auto [first, B] = batch_rows(order, index, o_.batch_size);
    return rows(std::vector<int64_t>(order.begin() + first, order.begin() + first + B), epoch);
  }

 protected:
  ItemStream(const StreamOptions& o, uint64_t salt) : o_(o), salt_(salt) {}
  virtual Batch rows(const std::vector<int64_t>& items, int64_t epoch) const = 0;
  StreamOptions o_;
  int64_t n_ = 0;  // items per epoch

 private:
  uint64_t salt_;
  OrderCache cache_;
};

// ---- causal LM

class LmStream : public ItemStream {
 public:
  LmStream(const TokenDataset& ds, const StreamOptions& o)
      : ItemStream(o, 0x11),
        text_(split_of<LmSplit>(ds, DataKind::kLm, "clm").text, Special::kEos,
              /*sep_starts_next=*/true) {
    n_ = (text_.size() - 1) / o.seq_len;
    if (n_ < o.world)
      throw UserError(ds.split + " split: " + std::to_string(text_.size()) +
                      " tokens are too few for one window of seq_len " + std::to_string(o.seq_len));
  }

 private:
  Batch rows(const std::vector<int64_t>& windows, int64_t) const override {
    const auto B = static_cast<int64_t>(windows.size());
    int64_t L = o_.seq_len;
    auto input = torch::empty({B, L}, torch::kInt64), target = torch::empty({B, L}, torch::kInt64);
    auto in = input.accessor<int64_t, 2>(), tg = target.accessor<int64_t, 2>();
    const bool docs = o_.documents;
    torch::Tensor doc_BT = docs ? torch::empty({B, L}, torch::kInt64) : torch::Tensor();
    std::vector<int32_t> tok(static_cast<size_t>(L + 1));
    std::vector<int64_t> doc(docs ? static_cast<size_t>(L + 1) : 0);
    for (int64_t b = 0; b < B; ++b) {
      text_.read(windows[b] * L, L + 1, tok.data(), docs ? doc.data() : nullptr);
      for (int64_t t = 0; t < L; ++t) {
        in[b][t] = tok[t];
        tg[b][t] = tok[t + 1];
      }
      if (docs) {
        auto dc = doc_BT.accessor<int64_t, 2>();
        for (int64_t t = 0; t < L; ++t) dc[b][t] = doc[t] - doc[0];
      }
    }
    Batch out;
    out.input_BT = input;
    out.target_BT = target;
    out.num_tokens = out.num_targets = B * L;
    out.doc_BT = doc_BT;
    return out;
  }
  JoinedText text_;
};

// ---- masked LM

class MlmStream : public ItemStream {
 public:
  MlmStream(const TokenDataset& ds, const StreamOptions& o)
      : ItemStream(o, 0x22),
        vocab_(ds.vocab_size),
        text_(split_of<LmSplit>(ds, DataKind::kLm, "mlm").text, Special::kSep,
              /*sep_starts_next=*/false) {
    if (o.seq_len < 3) throw UserError("task mlm needs seq_len >= 3");
    n_ = text_.size() / (o.seq_len - 2);
    if (n_ < o.world) throw UserError(ds.split + " split is too small for one MLM window");
  }

 private:
  Batch rows(const std::vector<int64_t>& windows, int64_t epoch) const override {
    const auto B = static_cast<int64_t>(windows.size());
    int64_t L = o_.seq_len, W = L - 2;
    auto input = torch::empty({B, L}, torch::kInt64);
    auto target = torch::full({B, L}, -100, torch::kInt64);
    auto in = input.accessor<int64_t, 2>(), tg = target.accessor<int64_t, 2>();
    int64_t selected = 0;
    const bool docs = o_.documents;
    torch::Tensor doc_BT = docs ? torch::empty({B, L}, torch::kInt64) : torch::Tensor();
    std::vector<int32_t> ids(static_cast<size_t>(W));
    std::vector<int64_t> doc(docs ? static_cast<size_t>(W) : 0);
    for (int64_t b = 0; b < B; ++b) {
      // The masks depend on (epoch, window) only: the same whichever rank or batch takes it.
      Rng rng(key_of(o_.seed, epoch, windows[b], 0x33));
      text_.read(windows[b] * W, W, ids.data(), docs ? doc.data() : nullptr);
      if (docs) {  // [CLS] with the first token's document, the closing [SEP] the last's
        auto dc = doc_BT.accessor<int64_t, 2>();
        for (int64_t t = 0; t < W; ++t) dc[b][t + 1] = doc[t] - doc[0];
        dc[b][0] = 0;
        dc[b][L - 1] = dc[b][L - 2];
      }
      in[b][0] = Special::kCls;
      for (int64_t t = 0; t < W; ++t) in[b][t + 1] = ids[t];
      in[b][L - 1] = Special::kSep;
      for (int64_t t = 1; t < L - 1; ++t) {
        int64_t tok = in[b][t];
        if (tok < Special::kCount) continue;  // never mask specials (SEP between documents)
        if (rng.uniform() >= o_.mask_prob) continue;
        tg[b][t] = tok;
        ++selected;
        double u = rng.uniform();
        if (u < o_.mask_token_frac)
          in[b][t] = Special::kMask;
        else if (u < o_.mask_token_frac + o_.random_token_frac)
          in[b][t] = Special::kCount + rng.below(vocab_ - Special::kCount);
      }
    }
    Batch out;
    out.input_BT = input;
    out.target_BT = target;
    out.num_tokens = B * L;
    out.num_targets = selected;
    out.scored_N = scored_positions(target);
    out.doc_BT = doc_BT;
    return out;
  }
  int64_t vocab_;
  JoinedText text_;
};

// ---- translation

class TranslationStream : public BatchStream {
 public:
  TranslationStream(const TokenDataset& ds, const StreamOptions& o) : o_(o) {
    const auto& pairs = split_of<ParallelSplit>(ds, DataKind::kParallel, "translation");
    src_ = pairs.src;
    tgt_ = pairs.tgt;
    budget_ = o.max_tokens > 0 ? o.max_tokens : o.batch_size * o.seq_len;
    if (budget_ < o.seq_len + 1)
      throw UserError("translation token budget (" + std::to_string(budget_) +
                      ") is smaller than one sequence (seq_len + 1)");
    // Batches are fixed once: pairs sorted by length (ties broken by a seeded key), cut into
    // runs whose padded size fits the budget. Epochs shuffle the batch order.
    int64_t n = src_.size();
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    auto len = [&](int64_t i) { return std::max(slen(i), tlen(i)); };
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      if (len(a) != len(b)) return len(a) < len(b);
      return mix64(o.seed ^ static_cast<uint64_t>(a)) < mix64(o.seed ^ static_cast<uint64_t>(b));
    });
    std::vector<int64_t> cur;
    int64_t cur_max = 0;
    for (int64_t i : idx) {
      int64_t m = std::max(cur_max, len(i));
      if (!cur.empty() && m * static_cast<int64_t>(cur.size() + 1) > budget_) {
        batches_.push_back(cur);
        cur.clear();
        m = len(i);
      }
      cur.push_back(i);
      cur_max = m;
    }
    if (!cur.empty()) batches_.push_back(cur);
  }
  int64_t slen(int64_t i) const { return std::min<int64_t>(src_.length(i), o_.seq_len); }
  int64_t tlen(int64_t i) const { return std::min<int64_t>(tgt_.length(i), o_.seq_len - 1) + 1; }
  int64_t batches_per_epoch() const override {
    int64_t n = static_cast<int64_t>(batches_.size());
    return o_.shuffle ? n / o_.world : n / o_.world + (o_.rank < n % o_.world ? 1 : 0);
  }
  Batch batch(int64_t epoch, int64_t index) const override {
    const auto& order = cache_.get(static_cast<int64_t>(batches_.size()), o_, epoch, 0x44);
    if (index >= static_cast<int64_t>(order.size()))
      throw std::out_of_range("translation batch index");
    const auto& ids = batches_[order[index]];
    int64_t B = static_cast<int64_t>(ids.size()), S = 0, T = 0;
    for (int64_t i : ids) S = std::max(S, slen(i)), T = std::max(T, tlen(i));
    auto src = torch::full({B, S}, Special::kPad, torch::kInt64);
    auto input = torch::full({B, T}, Special::kPad, torch::kInt64);
    auto target = torch::full({B, T}, -100, torch::kInt64);
    auto s = src.accessor<int64_t, 2>(), in = input.accessor<int64_t, 2>(),
         tg = target.accessor<int64_t, 2>();
    Batch out;
    for (int64_t b = 0; b < B; ++b) {
      int64_t i = ids[b], sl = slen(i), tl = tlen(i) - 1;
      for (int64_t t = 0; t < sl; ++t) s[b][t] = src_.begin(i)[t];
      in[b][0] = Special::kBos;
      for (int64_t t = 0; t < tl; ++t) in[b][t + 1] = tg[b][t] = tgt_.begin(i)[t];
      tg[b][tl] = Special::kEos;
      out.num_tokens += sl + tl + 1;
      out.num_targets += tl + 1;
    }
    out.src_BS = src;
    out.src_pad_BS = src != Special::kPad;
    out.input_BT = input;
    out.pad_BT = target != -100;
    out.target_BT = target;
    return out;
  }

 private:
  StreamOptions o_;
  Ragged src_, tgt_;
  int64_t budget_ = 0;
  std::vector<std::vector<int64_t>> batches_;
  OrderCache cache_;
};

// ---- GLUE

class GlueStream : public ItemStream {
 public:
  GlueStream(const TokenDataset& ds, const StreamOptions& o)
      : ItemStream(o, 0x55),
        split_(split_of<GlueSplit>(ds, DataKind::kGlue, "glue")),
        regression_(ds.num_labels == 0) {
    n_ = split_.a.size();
    if (n_ == 0) throw UserError(ds.split + " split has no examples");
  }

 private:
  Batch rows(const std::vector<int64_t>& examples, int64_t) const override {
    const auto B = static_cast<int64_t>(examples.size());
    const Ragged& a = split_.a;
    // Ranking triplets give two rows per example, (a, b) and (a, c), next to each other.
    std::vector<const Ragged*> second = {&split_.b};
    if (split_.ranking()) second.push_back(&split_.c);
    const auto per = static_cast<int64_t>(second.size());
    const int64_t R = B * per;
    std::vector<std::vector<int64_t>> rows(R), segs(R);
    int64_t T = 0;
    for (int64_t r = 0; r < R; ++r) {
      int64_t i = examples[r / per];
      const Ragged& b = *second[static_cast<size_t>(r % per)];
      int64_t la = a.length(i), lb = b.length(i);
      int64_t room = o_.seq_len - (lb > 0 ? 3 : 2);
      while (la + lb > room) (la >= lb ? la : lb)--;  // truncate the longer side first
      rows[r].push_back(Special::kCls);
      for (int64_t t = 0; t < la; ++t) rows[r].push_back(a.begin(i)[t]);
      rows[r].push_back(Special::kSep);
      segs[r].assign(rows[r].size(), 0);
      if (lb > 0) {
        for (int64_t t = 0; t < lb; ++t) rows[r].push_back(b.begin(i)[t]);
        rows[r].push_back(Special::kSep);
        segs[r].resize(rows[r].size(), 1);
      }
      T = std::max<int64_t>(T, static_cast<int64_t>(rows[r].size()));
    }
    auto input = torch::full({R, T}, Special::kPad, torch::kInt64);
    auto seg = torch::zeros({R, T}, torch::kInt64);
    auto in = input.accessor<int64_t, 2>(), sg = seg.accessor<int64_t, 2>();
    Batch out;
    auto label = torch::empty({B}, regression_ ? torch::kFloat32 : torch::kInt64);
    auto row_index = torch::empty({B}, torch::kInt64);
    for (int64_t r = 0; r < R; ++r) {
      for (size_t t = 0; t < rows[r].size(); ++t) in[r][t] = rows[r][t], sg[r][t] = segs[r][t];
      out.num_tokens += static_cast<int64_t>(rows[r].size());
    }
    for (int64_t r = 0; r < B; ++r) {
      row_index[r] = examples[r];
      float l = split_.labels[examples[r]];
      if (regression_)
        label[r] = l;
      else
        label[r] = static_cast<int64_t>(l);
    }
    out.input_BT = input;
    out.pad_BT = input != Special::kPad;
    out.segment_BT = seg;
    out.label_B = label;
    out.index_B = row_index;
    out.num_targets = B;
    return out;
  }
  GlueSplit split_;
  bool regression_;
};

// Synthetic examples (data/synthetic.h): each row one example, right-padded; next-token
// targets only where the next token is scored (an answer token), -100 elsewhere.
class SyntheticStream : public ItemStream {
 public:
  SyntheticStream(const TokenDataset& ds, const StreamOptions& o)
      : ItemStream(o, 0x5E), split_(split_of<SyntheticSplit>(ds, DataKind::kSynthetic, "answer")) {
    n_ = split_.tokens.size();
    if (n_ == 0) throw UserError(ds.split + " split has no examples");
  }

 private:
  Batch rows(const std::vector<int64_t>& examples, int64_t) const override {
    const auto B = static_cast<int64_t>(examples.size());
    const Ragged& tok = split_.tokens;
    const Ragged& scored = split_.scored;
    int64_t T = 1;
    for (int64_t i : examples) T = std::max(T, tok.length(i) - 1);
    auto input = torch::full({B, T}, Special::kPad, torch::kInt64);
    auto target = torch::full({B, T}, -100, torch::kInt64);
    auto in = input.accessor<int64_t, 2>(), tg = target.accessor<int64_t, 2>();
    Batch out;
    for (int64_t r = 0; r < B; ++r) {
      const int64_t i = examples[r], L = tok.length(i);
      const int32_t* t = tok.begin(i);
      const int32_t* s = scored.begin(i);
      for (int64_t p = 0; p + 1 < L; ++p) {
        in[r][p] = t[p];
        if (s[p + 1]) tg[r][p] = t[p + 1], out.num_targets += 1;
      }
      out.num_tokens += L - 1;
    }
    out.input_BT = input;
    out.target_BT = target;
    out.pad_BT = input != Special::kPad;
    out.scored_N = scored_positions(target);
    return out;
  }
  SyntheticSplit split_;
};

}  // namespace

std::vector<int64_t> permutation(int64_t n, uint64_t key) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  Rng rng(key);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[rng.below(i + 1)]);
  return p;
}

std::unique_ptr<BatchStream> make_lm_stream(const TokenDataset& ds, const StreamOptions& o) {
  return context_shares(std::make_unique<LmStream>(ds, o), o.context_parts, o.context_member);
}
std::unique_ptr<BatchStream> make_mlm_stream(const TokenDataset& ds, const StreamOptions& o) {
  return context_shares(std::make_unique<MlmStream>(ds, o), o.context_parts, o.context_member);
}

Batch context_share(const Batch& whole, int parts, int member) {
  if (parts <= 1) return whole;
  const int64_t T = whole.input_BT.size(1);
  if (T % (int64_t{2} * parts) != 0)
    throw UserError(fmt::format(
        "train.context_parallel: {} ranks split a sequence into {} equal pieces, but a batch "
        "holds sequences of {} tokens; make task.seq_len a multiple of {}",
        parts, 2 * parts, T, 2 * parts));
  const dist::ContextSplit split{T, parts};
  Batch b = whole;
  b.input_BT = split.shard(whole.input_BT, member, 1);
  b.target_BT = split.shard(whole.target_BT, member, 1);
  b.num_tokens = whole.pad_BT.defined() ? split.shard(whole.pad_BT, member, 1).sum().item<int64_t>()
                                        : b.input_BT.numel();
  b.num_targets = (b.target_BT != -100).sum().item<int64_t>();
  if (whole.scored_N.defined()) b.scored_N = scored_positions(b.target_BT);
  return b;
}

namespace {
class ContextShares : public BatchStream {
 public:
  ContextShares(std::unique_ptr<BatchStream> s, int parts, int member)
      : s_(std::move(s)), parts_(parts), member_(member) {}
  int64_t batches_per_epoch() const override { return s_->batches_per_epoch(); }
  Batch batch(int64_t epoch, int64_t index) const override {
    return context_share(s_->batch(epoch, index), parts_, member_);
  }

 private:
  std::unique_ptr<BatchStream> s_;
  int parts_, member_;
};
}  // namespace

std::unique_ptr<BatchStream> context_shares(std::unique_ptr<BatchStream> s, int parts, int member) {
  if (parts <= 1) return s;
  return std::make_unique<ContextShares>(std::move(s), parts, member);
}
std::unique_ptr<BatchStream> make_translation_stream(const TokenDataset& ds,
                                                     const StreamOptions& o) {
  return std::make_unique<TranslationStream>(ds, o);
}
std::unique_ptr<BatchStream> make_glue_stream(const TokenDataset& ds, const StreamOptions& o) {
  return std::make_unique<GlueStream>(ds, o);
}
std::unique_ptr<BatchStream> make_synthetic_stream(const TokenDataset& ds, const StreamOptions& o) {
  return std::make_unique<SyntheticStream>(ds, o);
}

namespace {
class RepeatStream : public BatchStream {
 public:
  explicit RepeatStream(Batch b) : b_(std::move(b)) {}
  int64_t batches_per_epoch() const override { return 1; }
  Batch batch(int64_t, int64_t) const override { return b_; }

 private:
  Batch b_;
};
}  // namespace

std::unique_ptr<BatchStream> make_repeat_stream(Batch b) {
  return std::make_unique<RepeatStream>(std::move(b));
}

}  // namespace ropelab::data
