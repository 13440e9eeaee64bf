#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <unordered_map>

#include "util/error.h"
#include "util/random.h"

namespace ropelab::data::synthetic {

using config::DataSource;
using tokenizers::Special;

namespace {

constexpr int kKeys = 128;  // mqar keys and values
const char* const kWords[] = {"The",  "the",    "grass", "is",       "green", "sky",   "blue",
                              "sun",  "yellow", "Here",  "we",       "go",    "There", "and",
                              "back", "again",  "pass",  "Remember", "it",    "What",  "key"};
const char* const kSeparators[] = {">", "+", "=", "|", ".", "?"};

struct Vocab {
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int32_t> ids;
  Vocab() {
    pieces = {"<pad>", "<unk>", "<s>", "</s>", "<cls>", "<sep>", "<mask>"};
    for (int d = 0; d < 10; ++d) pieces.push_back(std::to_string(d));
    for (char c = 'a'; c <= 'z'; ++c) pieces.emplace_back(1, c);
    for (int k = 0; k < kKeys; ++k) pieces.push_back("k" + std::to_string(k));
    for (int k = 0; k < kKeys; ++k) pieces.push_back("v" + std::to_string(k));
    for (const char* s : kSeparators) pieces.emplace_back(s);
    for (const char* w : kWords) pieces.emplace_back(w);
    for (size_t i = Special::kCount; i < pieces.size(); ++i)
      ids[pieces[i]] = static_cast<int32_t>(i);
  }
};

const Vocab& vocab() {
  static const Vocab v;
  return v;
}

int32_t sym(const std::string& s) { return vocab().ids.at(s); }
int32_t digit(int d) { return static_cast<int32_t>(Special::kCount + d); }
int32_t letter(int i) { return static_cast<int32_t>(Special::kCount + 10 + i); }
int32_t key_id(int k) { return static_cast<int32_t>(Special::kCount + 36 + k); }
int32_t value_id(int k) { return static_cast<int32_t>(Special::kCount + 36 + kKeys + k); }

// splitmix64 stream.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t key) : s(util::mix64(key)) {}
  uint64_t next() { return util::mix64(s += 0x9E3779B97F4A7C15ull); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

struct Builder {
  Example e;
  void add(int32_t id, bool answer = false) {
    e.tokens.push_back(id);
    e.scored.push_back(answer ? 1 : 0);
  }
  void words(const char* text) {
    std::istringstream in(text);
    std::string w;
    while (in >> w) add(sym(w));
  }
};

const char* kFiller =
    "The grass is green . The sky is blue . The sun is yellow . Here we go . There and back "
    "again .";
constexpr int64_t kPasskeyFixed = 40;  // BOS, key sentence (23), question (10), key (5), EOS

std::vector<int32_t> filler_tokens(int64_t n) {
  Builder b;
  b.words(kFiller);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out.push_back(b.e.tokens[static_cast<size_t>(i) % b.e.tokens.size()]);
  return out;
}

constexpr int64_t kNeedle = 13;     // 4 key digits, "is", 7 value digits, "."
constexpr int64_t kNiahKeys = 4;    // needles of niah-multikey (one asked, three distractors)
constexpr int64_t kNiahFixed = 16;  // BOS, "What is k k k k ?" (7), answer (7), EOS
// Flip-flop's smallest instance: the first write, the last read and four instructions between
// (1,250 distinct examples; with fewer, some split may get none of a size).
constexpr int64_t kFlipflopMin = 6;
constexpr int64_t kVtChain = 4;   // variables per chain (one value, three hops)
constexpr int64_t kVtFixed = 51;  // BOS, 2 chains (20 each), "What is X ?", 5 digits, EOS

void add_digits(Builder& b, const std::vector<int>& d, bool answer = false) {
  for (int x : d) b.add(digit(x), answer);
}

// n random digits, the first one not 0.
std::vector<int> number(Rng& r, int n) {
  std::vector<int> d;
  for (int i = 0; i < n; ++i) d.push_back(static_cast<int>(i == 0 ? 1 + r.below(9) : r.below(10)));
  return d;
}

// A haystack of F filler tokens with blocks inserted at filler offsets at[j] in [0, F] (ties in
// block order).
void haystack(Builder& b, int64_t F, const std::vector<int64_t>& at,
              const std::vector<std::vector<int32_t>>& blocks) {
  auto fill = filler_tokens(F);
  std::vector<size_t> order(blocks.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return at[x] < at[y]; });
  int64_t pos = 0;
  for (size_t j : order) {
    for (; pos < at[j]; ++pos) b.add(fill[static_cast<size_t>(pos)]);
    for (int32_t t : blocks[j]) b.add(t);
  }
  for (; pos < F; ++pos) b.add(fill[static_cast<size_t>(pos)]);
}

int64_t depth_offset(double depth, Rng& r, int64_t F) {
  const double d = depth < 0 ? r.uniform() : depth;
  return static_cast<int64_t>(std::llround(d * static_cast<double>(F)));
}

// One generator per source: the example after BOS, into `b`.
void draw_copy(Builder& b, DataSource src, int64_t n, Rng& r, [[maybe_unused]] double depth) {
  std::vector<int32_t> x;
  for (int64_t i = 0; i < n; ++i) x.push_back(letter(static_cast<int>(r.below(26))));
  for (auto t : x) b.add(t);
  b.add(sym(">"));
  if (src == DataSource::kSyntheticReverse) std::reverse(x.begin(), x.end());
  for (auto t : x) b.add(t, true);
  b.add(Special::kEos, true);
}

void draw_addition(Builder& b, [[maybe_unused]] DataSource src, int64_t n, Rng& r,
                   [[maybe_unused]] double depth) {
  std::vector<int> a, c;  // most significant digit first
  for (auto* v : {&a, &c}) {
    for (int64_t i = 0; i < n; ++i)
      v->push_back(static_cast<int>(i == 0 && n > 1 ? 1 + r.below(9) : r.below(10)));
  }
  for (int d : a) b.add(digit(d));
  b.add(sym("+"));
  for (int d : c) b.add(digit(d));
  b.add(sym("="));
  int carry = 0;
  for (int64_t i = n - 1; i >= 0; --i) {  // least significant first
    int s = a[static_cast<size_t>(i)] + c[static_cast<size_t>(i)] + carry;
    b.add(digit(s % 10), true);
    carry = s / 10;
  }
  if (carry) b.add(digit(carry), true);
  b.add(Special::kEos, true);
}

void draw_mqar(Builder& b, [[maybe_unused]] DataSource src, int64_t n, Rng& r,
               [[maybe_unused]] double depth) {
  std::vector<int> keys(kKeys);
  for (int k = 0; k < kKeys; ++k) keys[static_cast<size_t>(k)] = k;
  for (int64_t i = 0; i < n; ++i)  // partial Fisher-Yates: n distinct keys
    std::swap(keys[static_cast<size_t>(i)], keys[static_cast<size_t>(i + r.below(kKeys - i))]);
  std::vector<int> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(static_cast<int>(r.below(kKeys)));
  for (int64_t i = 0; i < n; ++i) {
    b.add(key_id(keys[static_cast<size_t>(i)]));
    b.add(value_id(values[static_cast<size_t>(i)]));
  }
  b.add(sym("|"));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r.below(i + 1))]);
  for (int64_t q : order) {
    b.add(key_id(keys[static_cast<size_t>(q)]));
    b.add(value_id(values[static_cast<size_t>(q)]), true);
  }
  b.add(Special::kEos);
}

void draw_passkey(Builder& b, [[maybe_unused]] DataSource src, int64_t n, Rng& r, double depth) {
  int keyd[5];
  keyd[0] = static_cast<int>(1 + r.below(9));
  for (int i = 1; i < 5; ++i) keyd[i] = static_cast<int>(r.below(10));
  const int64_t F = n - kPasskeyFixed;
  const double d = depth < 0 ? r.uniform() : depth;
  const auto at = static_cast<int64_t>(std::llround(d * static_cast<double>(F)));
  auto fill = filler_tokens(F);
  for (int64_t i = 0; i < at; ++i) b.add(fill[static_cast<size_t>(i)]);
  b.words("The pass key is");
  for (int x : keyd) b.add(digit(x));
  b.words(". Remember it .");
  for (int x : keyd) b.add(digit(x));
  b.words("is the pass key .");
  for (int64_t i = at; i < F; ++i) b.add(fill[static_cast<size_t>(i)]);
  b.words("What is the pass key ? The pass key is");
  for (int x : keyd) b.add(digit(x), true);
  b.add(Special::kEos);
}

void draw_selective_copy(Builder& b, [[maybe_unused]] DataSource src, int64_t n, Rng& r,
                         [[maybe_unused]] double depth) {
  // n positions, ceil(n / 4) of them letters, the rest "."; copy the letters in order.
  const int64_t m = (n + 3) / 4;
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i < m; ++i)  // partial Fisher-Yates: m distinct positions
    std::swap(pos[static_cast<size_t>(i)], pos[static_cast<size_t>(i + r.below(n - i))]);
  std::vector<int32_t> in(static_cast<size_t>(n), sym("."));
  for (int64_t i = 0; i < m; ++i)
    in[static_cast<size_t>(pos[static_cast<size_t>(i)])] = letter(static_cast<int>(r.below(26)));
  for (auto t : in) b.add(t);
  b.add(sym(">"));
  for (auto t : in)
    if (t != sym(".")) b.add(t, true);
  b.add(Special::kEos, true);
}

void draw_grid(Builder& b, [[maybe_unused]] DataSource src, int64_t n, Rng& r,
               [[maybe_unused]] double depth) {
  // A header row (BOS and W-1 "."), n rows of W letters, one cell above the last row
  // holding the marker; then "? K =" and the letter below the marker.
  for (int64_t c = 1; c < kGridWidth; ++c) b.add(sym("."));
  std::vector<int32_t> cells;
  for (int64_t i = 0; i < n * kGridWidth; ++i)
    cells.push_back(letter(static_cast<int>(r.below(26))));
  const int64_t at = r.below((n - 1) * kGridWidth);
  const int32_t marker = key_id(static_cast<int>(r.below(kKeys)));
  cells[static_cast<size_t>(at)] = marker;
  for (auto t : cells) b.add(t);
  b.add(sym("?"));
  b.add(marker);
  b.add(sym("="));
  b.add(cells[static_cast<size_t>(at + kGridWidth)], true);
  b.add(Special::kEos, true);
}

void draw_counting(Builder& b, [[maybe_unused]] DataSource src, int64_t n, Rng& r,
                   [[maybe_unused]] double depth) {
  // n letters of a..e, then "? q =" and how often q occurs, least significant digit first.
  int count = 0;
  const int q = static_cast<int>(r.below(5));
  for (int64_t i = 0; i < n; ++i) {
    const int x = static_cast<int>(r.below(5));
    count += x == q;
    b.add(letter(x));
  }
  b.add(sym("?"));
  b.add(letter(q));
  b.add(sym("="));
  do {
    b.add(digit(count % 10), true);
    count /= 10;
  } while (count > 0);
  b.add(Special::kEos, true);
}

void draw_flipflop(Builder& b, [[maybe_unused]] DataSource src, int64_t n, Rng& r,
                   [[maybe_unused]] double depth) {
  // n instructions "w b" (write), "i b" (ignore), "r b" (read: b is the last bit written);
  // the first writes, the last reads, the rest read or write with probability 0.1 each.
  int bit = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double u = r.uniform();
    const char op = i == 0 ? 'w' : i == n - 1 ? 'r' : u < 0.1 ? 'w' : u < 0.2 ? 'r' : 'i';
    b.add(letter(op - 'a'));
    if (op == 'r') {
      b.add(digit(bit), true);
    } else {
      const int x = static_cast<int>(r.below(2));
      if (op == 'w') bit = x;
      b.add(digit(x));
    }
  }
  b.add(Special::kEos);
}

void draw_niah(Builder& b, DataSource src, int64_t n, Rng& r, double depth) {
  // RULER's needle in a haystack with numeric keys: needles "KKKK is VVVVVVV ." in the
  // repeated filler, the asked one at `depth`; then "What is KKKK ?" and its 7 digits.
  const int64_t needles = src == DataSource::kSyntheticNiah ? 1 : kNiahKeys;
  const int64_t F = n - kNiahFixed - needles * kNeedle;
  std::vector<std::vector<int>> keys, values;
  while (static_cast<int64_t>(keys.size()) < needles) {
    auto k = number(r, 4);
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  for (int64_t j = 0; j < needles; ++j) values.push_back(number(r, 7));
  std::vector<std::vector<int32_t>> blocks;
  std::vector<int64_t> at;
  for (int64_t j = 0; j < needles; ++j) {
    Builder nb;
    add_digits(nb, keys[static_cast<size_t>(j)]);
    nb.words("is");
    add_digits(nb, values[static_cast<size_t>(j)]);
    nb.words(".");
    blocks.push_back(nb.e.tokens);
    at.push_back(j == 0 ? depth_offset(depth, r, F) : r.below(F + 1));
  }
  haystack(b, F, at, blocks);
  b.words("What is");
  add_digits(b, keys[0]);
  b.words("?");
  add_digits(b, values[0], true);
  b.add(Special::kEos);
}

void draw_variable_tracking(Builder& b, [[maybe_unused]] DataSource src, int64_t n, Rng& r,
                            [[maybe_unused]] double depth) {
  // RULER's variable tracking: two chains "A = VVVVV ." "B = A ." "C = B ." "D = C ."
  // (variables k0..k127, distinct) interleaved at random places in the filler, each in
  // order; then "What is D ?" for the first chain's last variable, and its 5 digits.
  const int64_t F = n - kVtFixed;
  std::vector<int> names;
  while (static_cast<int64_t>(names.size()) < 2 * kVtChain) {
    int k = static_cast<int>(r.below(kKeys));
    if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
  }
  std::vector<std::vector<int>> value = {number(r, 5), number(r, 5)};
  std::vector<int> chain_of;  // the interleaving: which chain's next statement comes
  for (int c = 0; c < 2; ++c)
    for (int64_t i = 0; i < kVtChain; ++i) chain_of.push_back(c);
  for (size_t i = chain_of.size() - 1; i > 0; --i)
    std::swap(chain_of[i], chain_of[static_cast<size_t>(r.below(static_cast<int64_t>(i) + 1))]);
  std::vector<int64_t> at;
  for (size_t i = 0; i < chain_of.size(); ++i) at.push_back(r.below(F + 1));
  std::sort(at.begin(), at.end());
  std::vector<std::vector<int32_t>> blocks;
  int64_t next[2] = {0, 0};
  for (int c : chain_of) {
    const int64_t i = next[c]++;
    Builder sb;
    sb.add(key_id(names[static_cast<size_t>(c * kVtChain + i)]));
    sb.words("=");
    if (i == 0)
      add_digits(sb, value[static_cast<size_t>(c)]);
    else
      sb.add(key_id(names[static_cast<size_t>(c * kVtChain + i - 1)]));
    sb.words(".");
    blocks.push_back(sb.e.tokens);
  }
  haystack(b, F, at, blocks);
  b.words("What is");
  b.add(key_id(names[static_cast<size_t>(kVtChain - 1)]));
  b.words("?");
  add_digits(b, value[0], true);
  b.add(Special::kEos);
}

Example draw(DataSource src, int64_t n, Rng& r, double depth) {
  Builder b;
  b.add(Special::kBos);
  switch (src) {
    case DataSource::kSyntheticCopy:
    case DataSource::kSyntheticReverse:
      draw_copy(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticAddition:
      draw_addition(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticMqar:
      draw_mqar(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticPasskey:
      draw_passkey(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticSelectiveCopy:
      draw_selective_copy(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticGrid:
      draw_grid(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticCounting:
      draw_counting(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticFlipflop:
      draw_flipflop(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticNiah:
    case DataSource::kSyntheticNiahMultikey:
      draw_niah(b, src, n, r, depth);
      break;
    case DataSource::kSyntheticVt:
      draw_variable_tracking(b, src, n, r, depth);
      break;
    default:
      throw UserError(std::string("data.source: ") + config::to_string(src) +
                      " is not a synthetic source");
  }
  return std::move(b.e);
}

}  // namespace

int64_t min_size(DataSource src) {
  switch (src) {
    case DataSource::kSyntheticPasskey:
      return kPasskeyFixed;
    case DataSource::kSyntheticNiah:
      return kNiahFixed + kNeedle;
    case DataSource::kSyntheticNiahMultikey:
      return kNiahFixed + kNiahKeys * kNeedle;
    case DataSource::kSyntheticVt:
      return kVtFixed;
    case DataSource::kSyntheticFlipflop:
      return kFlipflopMin;
    case DataSource::kSyntheticGrid:
      return 2;  // a cell with a cell below it
    default:
      return 1;
  }
}

bool has_depth(DataSource src) {
  return src == DataSource::kSyntheticPasskey || src == DataSource::kSyntheticNiah ||
         src == DataSource::kSyntheticNiahMultikey;
}

int64_t max_size(DataSource src) {
  return src == DataSource::kSyntheticMqar ? kKeys : int64_t{1} << 20;
}

int64_t max_tokens(DataSource src, int64_t n) {
  switch (src) {
    case DataSource::kSyntheticCopy:
    case DataSource::kSyntheticReverse:
      return 2 * n + 3;
    case DataSource::kSyntheticAddition:
      return 3 * n + 5;
    case DataSource::kSyntheticMqar:
      return 4 * n + 3;
    case DataSource::kSyntheticSelectiveCopy:
      return n + (n + 3) / 4 + 3;
    case DataSource::kSyntheticCounting:
      return n + 5 + static_cast<int64_t>(std::to_string(n).size());
    case DataSource::kSyntheticFlipflop:
      return 2 * n + 2;
    case DataSource::kSyntheticGrid:
      return kGridWidth * (n + 1) + 5;
    default:  // the size is the prompt in tokens
      return n;
  }
}

Split split_of(const Example& e) {
  uint64_t h = 0x5EEDull;
  for (size_t i = 0; i < e.tokens.size(); ++i)
    h = util::mix64(h ^
                    (static_cast<uint64_t>(e.tokens[i]) * 2 + static_cast<uint64_t>(e.scored[i])));
  const uint64_t bucket = h % 8;
  return bucket < 6 ? Split::kTrain : bucket == 6 ? Split::kValid : Split::kTest;
}

Example generate(DataSource src, int64_t size, uint64_t key, Split split, double depth) {
  const std::string name = config::to_string(src);
  if (size < min_size(src) || size > max_size(src))
    throw UserError(name + ": instance size " + std::to_string(size) + " is outside [" +
                    std::to_string(min_size(src)) + ", " + std::to_string(max_size(src)) + "]");
  if (depth > 1) throw UserError(name + ": the needle's depth must be in [0, 1]");
  Rng r(key);
  for (int attempt = 0; attempt < 4096; ++attempt) {
    Rng one(r.next());
    Example e = draw(src, size, one, depth);
    if (split_of(e) == split) return e;
  }
  throw UserError(name + ": no example of size " + std::to_string(size) +
                  " falls in this split (too few distinct examples of that size); HINT: raise "
                  "data.synthetic.min_size");
}

std::vector<Example> make_examples(DataSource src, Split split, int64_t count, int64_t lo,
                                   int64_t hi, uint64_t seed, double depth) {
  std::vector<Example> out;
  out.reserve(static_cast<size_t>(count));
  const uint64_t base = util::mix64(util::mix64(seed ^ (static_cast<uint64_t>(src) << 32)) +
                                    static_cast<uint64_t>(split));
  for (int64_t i = 0; i < count; ++i) {
    Rng r(base + static_cast<uint64_t>(i));
    const int64_t size = lo + r.below(hi - lo + 1);
    out.push_back(generate(src, size, r.next(), split, depth));
  }
  return out;
}

TokenDataset to_dataset(const std::vector<Example>& examples, const std::string& split) {
  TokenDataset ds = empty_dataset(DataKind::kSynthetic);
  ds.split = split;
  SyntheticTokenizer tok;
  ds.tokenizer = tok.fingerprint();
  ds.tokenizer_kind = tok.kind();
  ds.vocab_size = tok.vocab_size();
  for (const auto& e : examples) {
    ds.synthetic().tokens.push(e.tokens);
    ds.synthetic().scored.push(e.scored);
  }
  return ds;
}

Score score(const std::vector<Example>& examples,
            const std::vector<std::vector<int32_t>>& predicted) {
  Score s;
  for (size_t i = 0; i < examples.size(); ++i) {
    const auto& e = examples[i];
    if (i >= predicted.size() || predicted[i].size() != e.tokens.size())
      throw std::invalid_argument("synthetic::score: one prediction per token of each example");
    bool all = true;
    for (size_t t = 0; t < e.tokens.size(); ++t) {
      if (!e.scored[t]) continue;
      const bool ok = predicted[i][t] == e.tokens[t];
      s.tokens += 1;
      s.correct += ok ? 1 : 0;
      all = all && ok;
    }
    s.examples += 1;
    s.exact += all ? 1 : 0;
  }
  return s;
}

SyntheticTokenizer::SyntheticTokenizer() { (void)vocab(); }

int64_t SyntheticTokenizer::vocab_size() const {
  return static_cast<int64_t>(vocab().pieces.size());
}

int32_t SyntheticTokenizer::id(const std::string& symbol) const {
  auto it = vocab().ids.find(symbol);
  return it == vocab().ids.end() ? Special::kUnk : it->second;
}

std::vector<int32_t> SyntheticTokenizer::encode(const std::string& text) const {
  std::istringstream in(text);
  std::vector<int32_t> out;
  std::string w;
  while (in >> w) out.push_back(id(w));
  return out;
}

std::string SyntheticTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (auto i : ids) {
    if (i < Special::kCount || i >= vocab_size()) continue;
    if (!out.empty()) out += ' ';
    out += vocab().pieces[static_cast<size_t>(i)];
  }
  return out;
}

std::string SyntheticTokenizer::piece(int32_t id) const {
  return id >= 0 && id < vocab_size() ? vocab().pieces[static_cast<size_t>(id)] : "<unk>";
}

}  // namespace ropelab::data::synthetic
