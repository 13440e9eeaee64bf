// BLEU and chrF against sacreBLEU 2.x's golden values (computed with sacreBLEU 2.6.0), chrF
// against hand-computed values, and `ropelab bleu`'s input checks. Torch-free: the sanitizer
// tier runs these too.
#include <gtest/gtest.h>

#include "helpers.h"
#include "scoring/metrics.h"
#include "util/error.h"

namespace ropelab::scoring {
namespace {

TEST(Bleu, CorpusScoreWithTwoReferenceStreamsMatchesSacrebleu) {
  std::vector<std::string> hyps = {"The dog bit the man.", "It wasn't surprising.",
                                   "The man had just bitten him."};
  std::vector<std::vector<std::string>> refs = {
      {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
      {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};
  auto b = corpus_bleu(hyps, refs);
  EXPECT_NEAR(b.score, 48.530827, 1e-6);
  EXPECT_EQ(
      b.line(),
      "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)");
  EXPECT_EQ(bleu_signature(2), "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x");
}

TEST(Bleu, ExpSmoothingEmptyHypothesisAndStatistics) {
  auto b = corpus_bleu({"this is a fest"}, {{"this is a test"}});
  EXPECT_EQ(b.line().substr(0, 32), "BLEU = 59.46 75.0/66.7/50.0/50.0");
  EXPECT_NEAR(b.score, 59.46, 0.005);
  auto empty = corpus_bleu({""}, {{"hello world"}});
  EXPECT_EQ(empty.score, 0.0);
  EXPECT_EQ(empty.line().substr(0, 12), "BLEU = 0.00 ");
  auto s = bleu_stats("am I am a character sequence", {"I am a symbol string sequence a a"});
  EXPECT_EQ(s.correct, (std::array<double, 4>{4, 2, 1, 0}));
  EXPECT_EQ(s.total, (std::array<double, 4>{6, 5, 4, 3}));
}

TEST(Bleu, Tokenizer13aMatchesSacrebleu) {
  EXPECT_EQ(tokenize_13a("Hello, world! It's 3.5-4 km (approx.) &amp; \"quoted\"..."),
            "Hello , world ! It's 3.5 - 4 km ( approx . ) & \" quoted \" . . .");
  EXPECT_EQ(tokenize_13a("1,000.50 $5-6"), "1,000.50 $ 5 - 6");
  EXPECT_EQ(tokenize_13a("e.g. U.S.A."), "e . g . U . S . A .");
  EXPECT_EQ(tokenize_13a("a\xc2\xa0"
                         "b\xe3\x80\x80"
                         "c"),
            "a b c");  // U+00A0, U+3000
  EXPECT_EQ(tokenize_13a("M\xc3\xbcller's caf\xc3\xa9\xe2\x80\x94ok?"),
            "M\xc3\xbcller's caf\xc3\xa9\xe2\x80\x94ok ?");
}

TEST(Chrf, HandComputedValues) {
  // abc vs abd: unigrams 2/3 match, bigrams 1/2, trigrams 0/1; orders 4-6 absent. Mean
  // precision = mean recall = (2/3 + 1/2 + 0) / 3, so F2 = that.
  EXPECT_NEAR(corpus_chrf({"abc"}, {{"abd"}}), 100.0 * (2.0 / 3 + 0.5) / 3, 1e-9);
  EXPECT_NEAR(corpus_chrf({"a b c"}, {{"abc"}}), 100.0, 1e-9);  // whitespace is ignored
  EXPECT_EQ(corpus_chrf({""}, {{"abc"}}), 0.0);
  // Recall weighs more (beta = 2): a short exact prefix scores below a long superset.
  double shorter = corpus_chrf({"ab"}, {{"abcd"}}), longer = corpus_chrf({"abcdef"}, {{"abcd"}});
  EXPECT_LT(shorter, longer);
  // Several references: each sentence uses its best one.
  EXPECT_NEAR(corpus_chrf({"abc"}, {{"xyz"}, {"abc"}}), 100.0, 1e-9);
  EXPECT_EQ(chrf_signature(1), "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.x");
}

// Golden values from sacreBLEU 2.6.0 (its CHRF class, default options; made by
// scripts/golden/sacrebleu_golden.py): an order the reference has no n-grams of counts none of
// the hypothesis's, so an empty reference line, or one shorter than 6 characters, does not
// penalise the corpus score.
TEST(Chrf, EmptyAndShortReferencesMatchSacrebleu) {
  EXPECT_NEAR(corpus_chrf({"the cat sat on the mat", "hello there", "abc"},
                          {{"the cat sat on a mat", "", "ab"}}),
              72.08274166881603, 1e-9);
  EXPECT_NEAR(corpus_chrf({"abcdef"}, {{"abc"}}), 75.6578947368421, 1e-9);
  EXPECT_NEAR(corpus_chrf({"hello world"}, {{""}, {"hello word"}}), 82.6093801436548, 1e-9);
  EXPECT_EQ(corpus_chrf({"hello world", "x"}, {{"", ""}}), 0.0);
  EXPECT_NEAR(corpus_chrf({"el perro ve la casa roja", "un hombre", "gracias"},
                          {{"el perro ve una casa roja", "un", ""}}),
              72.7712159762561, 1e-9);
}

// sacreBLEU 2.6.0's scores and signatures (version aside) under --tokenize, --lowercase and
// --chrf-lowercase (scripts/golden/sacrebleu_golden.py), on accents, a capital sigma at a word's
// end, sharp s and dotted capital I.
TEST(Bleu, OptionsMatchSacrebleu) {
  const std::vector<std::string> hyps = {"The Dog bit THE man .",
                                         "\xc3\x89"
                                         "cole \xce\x9f\xce\x94\xce\x9f\xce\xa3 "
                                         "Stra\xc3\x9f"
                                         "e \xc4\xb0stanbul",
                                         "It was n't surprising ."};
  const std::vector<std::vector<std::string>> refs = {
      {"the dog bit the man .",
       "\xc3\xa9"
       "cole \xce\xbf\xce\xb4\xce\xbf\xcf\x82 strasse istanbul",
       "it was not unexpected ."}};
  struct Case {
    const char* tok;
    bool lc;
    double score;
    const char* line;
  };
  const Case cases[] = {
      {"13a", false, 8.95474943186285, "8.95 33.3/8.3/5.6/4.2 (BP = 1.000 ratio = 1.000"},
      {"13a", true, 55.52664410595373, "55.53 73.3/58.3/44.4/50.0 (BP = 1.000 ratio = 1.000"},
      {"none", false, 8.95474943186285, "8.95 33.3/8.3/5.6/4.2 (BP = 1.000 ratio = 1.000"},
      {"none", true, 55.52664410595373, "55.53 73.3/58.3/44.4/50.0 (BP = 1.000 ratio = 1.000"},
      {"char", false, 35.361202322050545, "35.36 63.8/41.8/30.8/20.4 (BP = 0.983 ratio = 0.983"},
      {"char", true, 68.6900348249228, "68.69 83.1/69.6/64.2/60.0 (BP = 1.000 ratio = 1.000"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.tok) + (c.lc ? " lc" : ""));
    BleuOptions o{c.tok, c.lc};
    auto b = corpus_bleu(hyps, refs, o);
    EXPECT_NEAR(b.score, c.score, 1e-9);
    EXPECT_EQ(b.line().substr(7, std::string(c.line).size()), c.line);
    EXPECT_EQ(bleu_signature(1, o), std::string("nrefs:1|case:") + (c.lc ? "lc" : "mixed") +
                                        "|eff:no|tok:" + c.tok + "|smooth:exp|version:2.x");
  }
  EXPECT_NEAR(corpus_chrf(hyps, refs), 28.29619867182905, 1e-9);
  EXPECT_NEAR(corpus_chrf(hyps, refs, ChrfOptions{true}), 63.693966155480155, 1e-9);
  EXPECT_EQ(chrf_signature(1, ChrfOptions{true}),
            "nrefs:1|case:lc|eff:yes|nc:6|nw:0|space:no|version:2.x");
  // Python's str.lower(), its two context rules included.
  EXPECT_EQ(text::py_lower(
                "\xce\x9f\xce\x94\xce\x9f\xce\xa3 Stra\xc3\x9f"
                "e \xc4\xb0stanbul \xce\xa3\xce\x91\xce\xa3 \xce\xa3 \xc3\x80\xc3\x89\xc3\x8e"),
            "\xce\xbf\xce\xb4\xce\xbf\xcf\x82 stra\xc3\x9f"
            "e i\xcc\x87stanbul \xcf\x83\xce\xb1\xcf\x82 \xcf\x83 \xc3\xa0\xc3\xa9\xc3\xae");
  EXPECT_THROW(check_tokenizer("ja-mecab"), UserError);
}

TEST(Bleu, ScoreFilesChecksItsInputs) {
  test::TempDir d;
  auto hyp = test::write(d.file("hyp"), "The dog bit the man.\nIt wasn't surprising.\n");
  auto ref = test::write(d.file("ref"), "The dog bit the man.\nIt was not unexpected.\n");
  auto out = score_files({hyp}, {ref}).text;
  EXPECT_EQ(out.rfind("BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x = ", 0), 0u)
      << out;
  EXPECT_NE(out.find("\nchrF2|nrefs:1|"), std::string::npos) << out;
  auto short_ref = test::write(d.file("short"), "The dog bit the man.\n");
  try {
    score_files({hyp}, {short_ref});
    FAIL() << "mismatched line counts were accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("has 1 lines but"), std::string::npos) << e.what();
  }
  auto bad = test::write(d.file("bad"), "fine\nbad \xff byte\n");
  try {
    score_files({bad}, {ref});
    FAIL() << "invalid UTF-8 was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(":2: invalid UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(score_files({test::write(d.file("empty"), "")}, {test::write(d.file("e2"), "")}),
               UserError);
}

TEST(PairedTable, MarksSignificantAndEqualScores) {
  std::vector<std::string> refs, good, same, bad;
  for (int i = 0; i < 40; ++i) {
    std::string n = std::to_string(i);
    refs.push_back("the cat number " + n + " sat on the mat today");
    good.push_back(i % 4 == 0 ? "a cat number " + n + " sat on a mat" : refs.back());
    bad.push_back("dogs " + n + " ran far away");
  }
  same = good;
  ScoreOptions o;
  o.metrics = {"bleu"};
  o.paired_bs_n = 200;
  o.paired_ar_n = 300;
  auto table = paired_table({"good", "same", "bad"}, {good, same, bad}, {refs}, o, false);
  auto row = [&](const std::string& name) {
    auto at = table.find("  " + name + "  ");
    EXPECT_NE(at, std::string::npos) << table;
    return table.substr(at, table.find('\n', at) - at);
  };
  EXPECT_NE(table.find("baseline: good"), std::string::npos) << table;
  EXPECT_NE(row("same").find("0.0050 (equal)"), std::string::npos) << row("same");  // 1/201
  EXPECT_EQ(row("same").find('*'), std::string::npos) << row("same");
  EXPECT_NE(row("bad").find("0.0050 *"), std::string::npos) << row("bad");
  EXPECT_NE(row("bad").find("0.0033 *"), std::string::npos) << row("bad");  // 1/301
  EXPECT_NE(table.find("BLEU|nrefs:1|bs:200|seed:12345|case:mixed|"), std::string::npos);
  EXPECT_NE(table.find("BLEU|nrefs:1|ar:300|seed:12345|case:mixed|"), std::string::npos);
  o.paired = "xy";
  EXPECT_THROW(paired_table({"a", "b"}, {good, bad}, {refs}, o, false), UserError);
}

}  // namespace
}  // namespace ropelab::scoring
