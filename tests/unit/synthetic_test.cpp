// The synthetic probes (data/synthetic.h): each format by hand, determinism per seed, disjoint
// splits, scoring of hand-made outputs. Torch-free: the sanitizer tier runs it too.
#include <algorithm>
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

const DataSource kAll[] = {DataSource::kSyntheticPasskey, DataSource::kSyntheticMqar,
                           DataSource::kSyntheticCopy, DataSource::kSyntheticReverse,
                           DataSource::kSyntheticAddition};

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
  EXPECT_EQ(tok.encode("nonsense")[0], text::Special::kUnk);
  EXPECT_EQ(tok.piece(tok.id("yellow")), "yellow");
  // 7 specials, 10 digits, 26 letters, 128 keys, 128 values, 6 separators, 21 words.
  EXPECT_EQ(tok.vocab_size(), 7 + 10 + 26 + 256 + 6 + 21);
}

TEST(Synthetic, CopyAndReverseFormats) {
  for (auto src : {DataSource::kSyntheticCopy, DataSource::kSyntheticReverse}) {
    auto e = syn::generate(src, 5, 42, Split::kTrain);
    ASSERT_EQ(e.tokens.size(), 2 * 5 + 3u);
    EXPECT_EQ(e.tokens.front(), text::Special::kBos);
    EXPECT_EQ(e.tokens.back(), text::Special::kEos);
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
