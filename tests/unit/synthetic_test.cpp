// The synthetic probes (data/synthetic.h): each format by hand, determinism per seed, disjoint
// splits, scoring of hand-made outputs. Torch-free: the sanitizer tier runs it too.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "data/synthetic.h"
#include "helpers.h"
#include "util/error.h"

namespace ropelab {
namespace {

using config::DataSource;
using data::synthetic::Example;
using data::synthetic::Split;
namespace syn = data::synthetic;

const DataSource kAll[] = {DataSource::kSyntheticPasskey,  DataSource::kSyntheticMqar,
                           DataSource::kSyntheticCopy,     DataSource::kSyntheticReverse,
                           DataSource::kSyntheticAddition, DataSource::kSyntheticSelectiveCopy,
                           DataSource::kSyntheticCounting, DataSource::kSyntheticFlipflop,
                           DataSource::kSyntheticNiah,     DataSource::kSyntheticNiahMultikey,
                           DataSource::kSyntheticVt,       DataSource::kSyntheticGrid};

syn::SyntheticTokenizer tok;

// The example as text, and its answer tokens as text.
std::string text_of(const Example& e) { return tok.decode(e.tokens); }
std::string answer_of(const Example& e) {
  std::vector<int32_t> a;
  for (size_t i = 0; i < e.tokens.size(); ++i)
    if (e.scored[i]) a.push_back(e.tokens[i]);
  return tok.decode(a);
}
std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(Synthetic, TokenizerRoundTrips) {
  EXPECT_EQ(tok.decode(tok.encode("a b > b a")), "a b > b a");
  EXPECT_EQ(tok.encode("k3 v127 What ?").size(), 4u);
  EXPECT_EQ(tok.encode("nonsense")[0], tokenizers::Special::kUnk);
  EXPECT_EQ(tok.piece(tok.id("yellow")), "yellow");
  // 7 specials, 10 digits, 26 letters, 128 keys, 128 values, 6 separators, 21 words.
  EXPECT_EQ(tok.vocab_size(), 7 + 10 + 26 + 256 + 6 + 21);
}

TEST(Synthetic, CopyAndReverseFormats) {
  for (auto src : {DataSource::kSyntheticCopy, DataSource::kSyntheticReverse}) {
    auto e = syn::generate(src, 5, 42, Split::kTrain);
    ASSERT_EQ(e.tokens.size(), 2 * 5 + 3u);
    EXPECT_EQ(e.tokens.front(), tokenizers::Special::kBos);
    EXPECT_EQ(e.tokens.back(), tokenizers::Special::kEos);
    auto w = words(text_of(e));  // specials dropped: x1..x5 > y1..y5
    ASSERT_EQ(w.size(), 11u);
    EXPECT_EQ(w[5], ">");
    std::vector<std::string> in(w.begin(), w.begin() + 5), out(w.begin() + 6, w.end());
    if (src == DataSource::kSyntheticReverse) std::reverse(in.begin(), in.end());
    EXPECT_EQ(in, out);
    // Scored: the output and its EOS, nothing else.
    int scored = 0;
    for (auto s : e.scored) scored += s;
    EXPECT_EQ(scored, 6);
    EXPECT_EQ(e.scored.back(), 1);
    EXPECT_EQ(e.scored[6], 0);  // '>'
    EXPECT_EQ(e.scored[7], 1);  // first output symbol
  }
}

TEST(Synthetic, AdditionWritesTheSumLeastSignificantDigitFirst) {
  for (int64_t n : {1, 3, 12}) {
    for (uint64_t key = 0; key < 20; ++key) {
      auto e = syn::generate(DataSource::kSyntheticAddition, n, key, Split::kTrain);
      auto w = words(text_of(e));
      auto plus = std::find(w.begin(), w.end(), "+"), eq = std::find(w.begin(), w.end(), "=");
      ASSERT_NE(plus, w.end());
      ASSERT_NE(eq, w.end());
      std::string a, b, s;
      for (auto it = w.begin(); it != plus; ++it) a += *it;
      for (auto it = plus + 1; it != eq; ++it) b += *it;
      for (auto it = eq + 1; it != w.end(); ++it) s = *it + s;  // back to most significant first
      ASSERT_EQ(a.size(), static_cast<size_t>(n));
      ASSERT_EQ(b.size(), static_cast<size_t>(n));
      if (n > 1) {
        EXPECT_NE(a[0], '0');
      }
      // Long-hand addition of the decimal strings.
      std::string want;
      int carry = 0;
      for (int64_t i = n - 1; i >= 0; --i) {
        int d = (a[i] - '0') + (b[i] - '0') + carry;
        want = static_cast<char>('0' + d % 10) + want;
        carry = d / 10;
      }
      if (carry) want = "1" + want;
      EXPECT_EQ(s, want) << a << " + " << b;
      EXPECT_EQ(std::accumulate(e.scored.begin(), e.scored.end(), 0),
                static_cast<int>(want.size()) + 1);  // the sum's digits and EOS
      EXPECT_LE(static_cast<int64_t>(e.tokens.size()),
                syn::max_tokens(DataSource::kSyntheticAddition, n));
    }
  }
}

TEST(Synthetic, MqarAnswersEveryKeyWithItsValue) {
  auto e = syn::generate(DataSource::kSyntheticMqar, 10, 7, Split::kTrain);
  auto w = words(text_of(e));
  ASSERT_EQ(w.size(), 41u);  // 10 pairs, |, 10 queries with values
  EXPECT_EQ(w[20], "|");
  std::map<std::string, std::string> kv;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(w[2 * i][0], 'k');
    EXPECT_EQ(kv.count(w[2 * i]), 0u) << "keys are distinct";
    kv[w[2 * i]] = w[2 * i + 1];
  }
  std::set<std::string> asked;
  int scored = 0;
  for (int i = 0; i < 10; ++i) {
    const auto& q = w[21 + 2 * i];
    EXPECT_EQ(w[22 + 2 * i], kv.at(q));
    asked.insert(q);
    scored += e.scored[static_cast<size_t>(23 + 2 * i)];  // +1 for BOS
  }
  EXPECT_EQ(asked.size(), 10u) << "every key is queried once";
  EXPECT_EQ(scored, 10);
  EXPECT_EQ(std::accumulate(e.scored.begin(), e.scored.end(), 0), 10);
  EXPECT_THROW(syn::generate(DataSource::kSyntheticMqar, 129, 1, Split::kTrain), UserError);
}

TEST(Synthetic, PasskeyFollowsTheYarnPromptAtTheAskedDepth) {
  const int64_t n = 100;
  for (double depth : {0.0, 0.5, 1.0}) {
    auto e = syn::generate(DataSource::kSyntheticPasskey, n, 3, Split::kTest, depth);
    ASSERT_EQ(static_cast<int64_t>(e.tokens.size()), n);
    auto t = text_of(e);
    // The key sentence holds the key twice; the answer is the same five digits.
    auto key_at = t.find("The pass key is ");
    ASSERT_NE(key_at, std::string::npos);
    std::string key = t.substr(key_at + 16, 9);  // "d d d d d"
    EXPECT_NE(t.find(key + " . Remember it . " + key + " is the pass key ."), std::string::npos);
    EXPECT_EQ(answer_of(e), key);
    const std::string question = "What is the pass key ? The pass key is " + key;
    EXPECT_EQ(t.substr(t.size() - question.size()), question);
    // Depth: the filler before the key sentence is depth x the filler (60 tokens here).
    const auto before = words(t.substr(0, key_at)).size();
    EXPECT_EQ(before, static_cast<size_t>(std::llround(depth * (n - 40))));
    if (depth == 0.0) {
      EXPECT_EQ(key_at, 0u);
    } else {
      EXPECT_EQ(t.substr(0, 19), "The grass is green ");
    }
  }
  EXPECT_THROW(syn::generate(DataSource::kSyntheticPasskey, 39, 1, Split::kTrain), UserError);
}

// The answer of each challenger probe, recomputed from the example's own text.
TEST(Synthetic, SelectiveCopyCopiesTheLettersInOrder) {
  for (int64_t n : {1, 7, 40}) {
    for (uint64_t key = 0; key < 10; ++key) {
      auto e = syn::generate(DataSource::kSyntheticSelectiveCopy, n, key, Split::kTrain);
      auto w = words(text_of(e));
      auto gt = std::find(w.begin(), w.end(), ">");
      ASSERT_EQ(gt - w.begin(), n);
      std::string letters;
      for (auto it = w.begin(); it != gt; ++it)
        if (*it != ".") letters += *it + " ";
      EXPECT_EQ(std::count_if(w.begin(), gt, [](const std::string& x) { return x != "."; }),
                (n + 3) / 4);
      EXPECT_EQ(answer_of(e) + " ", letters);
      EXPECT_EQ(e.scored.back(), 1);  // EOS
      EXPECT_LE(static_cast<int64_t>(e.tokens.size()),
                syn::max_tokens(DataSource::kSyntheticSelectiveCopy, n));
    }
  }
}

TEST(Synthetic, CountingCountsTheAskedLetter) {
  for (int64_t n : {1, 9, 120}) {
    for (uint64_t key = 0; key < 10; ++key) {
      auto e = syn::generate(DataSource::kSyntheticCounting, n, key, Split::kTrain);
      auto w = words(text_of(e));
      ASSERT_EQ(w[static_cast<size_t>(n)], "?");
      const std::string q = w[static_cast<size_t>(n) + 1];
      EXPECT_EQ(w[static_cast<size_t>(n) + 2], "=");
      const auto count = std::count(w.begin(), w.begin() + n, q);
      std::string lsd_first;
      for (auto c = count;; c /= 10) {
        lsd_first += std::to_string(c % 10) + " ";
        if (c < 10) break;
      }
      EXPECT_EQ(answer_of(e) + " ", lsd_first) << text_of(e);
      EXPECT_LE(static_cast<int64_t>(e.tokens.size()),
                syn::max_tokens(DataSource::kSyntheticCounting, n));
    }
  }
}

TEST(Synthetic, FlipflopReadsTheLastWrittenBit) {
  int reads = 0;
  for (uint64_t key = 0; key < 20; ++key) {
    const int64_t n = 50;
    auto e = syn::generate(DataSource::kSyntheticFlipflop, n, key, Split::kTrain);
    auto w = words(text_of(e));
    ASSERT_EQ(w.size(), 2u * n);
    EXPECT_EQ(w.front(), "w");
    EXPECT_EQ(w[w.size() - 2], "r");
    std::string last;
    for (size_t i = 0; i < w.size(); i += 2) {
      ASSERT_TRUE(w[i] == "w" || w[i] == "i" || w[i] == "r") << w[i];
      ASSERT_TRUE(w[i + 1] == "0" || w[i + 1] == "1");
      EXPECT_EQ(e.scored[i + 2], w[i] == "r" ? 1 : 0);  // +1 for BOS, the bit after the op
      if (w[i] == "w") last = w[i + 1];
      if (w[i] == "r") {
        EXPECT_EQ(w[i + 1], last);
        ++reads;
      }
    }
  }
  EXPECT_GT(reads, 20 * 3);  // about 5 reads per 50 instructions, plus the last
}

TEST(Synthetic, NiahAsksANumericKeyAtTheDepth) {
  for (auto src : {DataSource::kSyntheticNiah, DataSource::kSyntheticNiahMultikey}) {
    const size_t needles = src == DataSource::kSyntheticNiah ? 1 : 4;
    const int64_t n = 150;
    for (double depth : {0.0, 0.5, 1.0}) {
      auto e = syn::generate(src, n, 5, Split::kTest, depth);
      ASSERT_EQ(static_cast<int64_t>(e.tokens.size()), n);
      auto w = words(text_of(e));
      // Needles: 4 digits, "is", 7 digits, "."; the filler never has digits.
      std::map<std::string, std::string> kv;
      std::vector<size_t> starts;
      for (size_t i = 0; i + 12 < w.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(w[i][0])) || w[i + 4] != "is") continue;
        std::string k, v;
        for (size_t j = 0; j < 4; ++j) k += w[i + j];
        for (size_t j = 5; j < 12; ++j) v += w[i + j];
        EXPECT_EQ(w[i + 12], ".");
        EXPECT_EQ(kv.count(k), 0u) << "keys are distinct";
        kv[k] = v;
        starts.push_back(i);
        i += 12;
      }
      ASSERT_EQ(kv.size(), needles) << text_of(e);
      // The question: "What is K K K K ?" then the value.
      const size_t q = w.size() - 14;  // What is K K K K ? V x 7
      ASSERT_EQ(w[q], "What");
      std::string k, answer;
      for (size_t j = 2; j < 6; ++j) k += w[q + j];
      EXPECT_EQ(w[q + 6], "?");
      for (size_t j = 7; j < 14; ++j) answer += w[q + j];
      ASSERT_EQ(kv.count(k), 1u);
      EXPECT_EQ(answer, kv[k]);
      std::string scored = answer_of(e);
      scored.erase(std::remove(scored.begin(), scored.end(), ' '), scored.end());
      EXPECT_EQ(scored, answer);
      // The asked needle sits after depth x the filler (the other needles may come before it).
      const int64_t filler = n - 16 - static_cast<int64_t>(needles) * 13;
      size_t asked_at = 0;
      for (size_t st : starts) {
        std::string sk;
        for (size_t j = 0; j < 4; ++j) sk += w[st + j];
        if (sk == k) asked_at = st;
      }
      size_t other_before = 0;
      for (size_t st : starts) other_before += st < asked_at ? 13 : 0;
      EXPECT_EQ(static_cast<int64_t>(asked_at - other_before),
                std::llround(depth * static_cast<double>(filler)));
    }
  }
  EXPECT_TRUE(syn::has_depth(DataSource::kSyntheticNiahMultikey));
  EXPECT_FALSE(syn::has_depth(DataSource::kSyntheticVt));
  EXPECT_THROW(syn::generate(DataSource::kSyntheticNiahMultikey, 67, 1, Split::kTrain), UserError);
  EXPECT_EQ(syn::generate(DataSource::kSyntheticNiahMultikey, 68, 1, Split::kTrain).tokens.size(),
            68u);
}

TEST(Synthetic, VariableTrackingFollowsTheChain) {
  for (uint64_t key = 0; key < 20; ++key) {
    const int64_t n = 120;
    auto e = syn::generate(DataSource::kSyntheticVt, n, key, Split::kTrain);
    ASSERT_EQ(static_cast<int64_t>(e.tokens.size()), n);
    auto w = words(text_of(e));
    // Resolve every "X = ... ." statement in order, then the asked variable.
    std::map<std::string, std::string> value;
    int statements = 0;
    for (size_t i = 0; i + 2 < w.size(); ++i) {
      if (w[i][0] != 'k' || w[i + 1] != "=") continue;
      std::string v;
      size_t j = i + 2;
      if (w[j][0] == 'k') {
        ASSERT_EQ(value.count(w[j]), 1u) << "a variable is assigned before it is used";
        v = value[w[j]], ++j;
      } else {
        for (; w[j] != "."; ++j) v += w[j];
      }
      EXPECT_EQ(w[j], ".");
      value[w[i]] = v;
      ++statements;
    }
    EXPECT_EQ(statements, 8);
    const size_t q = w.size() - 9;  // What is X ? d d d d d
    ASSERT_EQ(w[q], "What");
    ASSERT_EQ(value.count(w[q + 2]), 1u);
    std::string answer = answer_of(e);
    answer.erase(std::remove(answer.begin(), answer.end(), ' '), answer.end());
    EXPECT_EQ(answer, value[w[q + 2]]);
    EXPECT_EQ(answer.size(), 5u);
  }
  EXPECT_THROW(syn::generate(DataSource::kSyntheticVt, 50, 1, Split::kTrain), UserError);
}

TEST(Synthetic, GridAsksForTheCellBelowTheMarker) {
  const int64_t W = syn::kGridWidth;
  for (uint64_t key = 0; key < 30; ++key) {
    const int64_t rows = 2 + static_cast<int64_t>(key % 5);
    auto e = syn::generate(DataSource::kSyntheticGrid, rows, key, Split::kTrain);
    ASSERT_EQ(static_cast<int64_t>(e.tokens.size()),
              syn::max_tokens(DataSource::kSyntheticGrid, rows));
    auto w = words(text_of(e));
    ASSERT_EQ(w.size(), e.tokens.size() - 2);  // BOS and EOS decode to nothing
    // The header row: BOS (position 0) and W - 1 dots, so cell (r, c) is at position W r + c.
    for (int64_t c = 0; c + 1 < W; ++c) EXPECT_EQ(w[static_cast<size_t>(c)], ".");
    std::vector<std::string> grid(w.begin() + (W - 1), w.begin() + (W - 1) + rows * W);
    int64_t marker_at = -1;
    for (int64_t i = 0; i < rows * W; ++i) {
      const auto& cell = grid[static_cast<size_t>(i)];
      if (cell.size() > 1 && cell[0] == 'k') {  // a key, not the letter k
        EXPECT_EQ(marker_at, -1) << "one marker";
        marker_at = i;
      } else {
        EXPECT_EQ(cell.size(), 1u);
      }
    }
    ASSERT_GE(marker_at, 0);
    EXPECT_LT(marker_at, (rows - 1) * W) << "the marker has a cell below it";
    const size_t q = w.size() - 4;  // ? K = y
    EXPECT_EQ(w[q], "?");
    EXPECT_EQ(w[q + 1], grid[static_cast<size_t>(marker_at)]);
    EXPECT_EQ(w[q + 2], "=");
    EXPECT_EQ(answer_of(e), grid[static_cast<size_t>(marker_at + W)]);
    // In token positions: the marker's row and column, one row down, hold the answer.
    const size_t marker_pos = static_cast<size_t>(W + marker_at);
    EXPECT_EQ(e.tokens[marker_pos + static_cast<size_t>(W)], e.tokens[e.tokens.size() - 2]);
  }
  EXPECT_THROW(syn::generate(DataSource::kSyntheticGrid, 1, 1, Split::kTrain), UserError);
}

TEST(Synthetic, DeterministicPerSeedAndSplitsDisjoint) {
  for (auto src : kAll) {
    const int64_t lo = syn::min_size(src), hi = lo + 3;
    auto a = syn::make_examples(src, Split::kTrain, 50, lo, hi, 11);
    auto b = syn::make_examples(src, Split::kTrain, 50, lo, hi, 11);
    auto c = syn::make_examples(src, Split::kTrain, 50, lo, hi, 12);
    ASSERT_EQ(a.size(), 50u);
    bool same = true, differ = false;
    for (size_t i = 0; i < a.size(); ++i) {
      same = same && a[i].tokens == b[i].tokens && a[i].scored == b[i].scored;
      differ = differ || a[i].tokens != c[i].tokens;
    }
    EXPECT_TRUE(same) << config::to_string(src) << ": same seed, same examples";
    EXPECT_TRUE(differ) << config::to_string(src) << ": another seed, other examples";
    // Sizes stay within [lo, hi] and within max_tokens.
    for (const auto& e : a)
      EXPECT_LE(static_cast<int64_t>(e.tokens.size()), syn::max_tokens(src, hi));
  }
  // Small instance spaces (copy of 1-2 letters: 702 examples) make collisions likely; the
  // content hash still keeps every split apart.
  std::set<std::vector<int32_t>> seen[3];
  const Split splits[] = {Split::kTrain, Split::kValid, Split::kTest};
  for (int s = 0; s < 3; ++s)
    for (const auto& e : syn::make_examples(DataSource::kSyntheticCopy, splits[s], 400, 1, 2, 5)) {
      EXPECT_EQ(syn::split_of(e), splits[s]);
      seen[s].insert(e.tokens);
    }
  for (int s = 0; s < 3; ++s)
    for (int t = s + 1; t < 3; ++t)
      for (const auto& x : seen[s]) EXPECT_EQ(seen[t].count(x), 0u) << "splits " << s << ", " << t;
  EXPECT_GT(seen[0].size(), 100u);
}

TEST(Synthetic, ScoresHandMadeOutputs) {
  // Passkey: all five digits right, or one wrong; a wrong filler guess does not count.
  auto pk = syn::generate(DataSource::kSyntheticPasskey, 60, 9, Split::kTest, 0.5);
  std::vector<int32_t> right = pk.tokens, one_wrong = pk.tokens, filler_wrong = pk.tokens;
  size_t last_digit = pk.tokens.size() - 2;
  ASSERT_EQ(pk.scored[last_digit], 1);
  one_wrong[last_digit] = tok.id(tok.piece(pk.tokens[last_digit]) == "0" ? "1" : "0");
  filler_wrong[3] = tok.id("sky");
  auto s = syn::score({pk, pk, pk}, {right, one_wrong, filler_wrong});
  EXPECT_EQ(s.examples, 3);
  EXPECT_EQ(s.exact, 2);
  EXPECT_EQ(s.tokens, 15);
  EXPECT_EQ(s.correct, 14);
  // MQAR: two of ten values wrong in one example.
  auto mq = syn::generate(DataSource::kSyntheticMqar, 10, 1, Split::kTest);
  auto guess = mq.tokens;
  int changed = 0;
  for (size_t i = 0; i < guess.size() && changed < 2; ++i)
    if (mq.scored[i]) guess[i] = tok.id("v0") == guess[i] ? tok.id("v1") : tok.id("v0"), ++changed;
  s = syn::score({mq}, {guess});
  EXPECT_EQ(s.exact, 0);
  EXPECT_EQ(s.tokens, 10);
  EXPECT_EQ(s.correct, 8);
  EXPECT_THROW(syn::score({mq}, {{1, 2}}), std::invalid_argument);
}

}  // namespace
}  // namespace ropelab
