// Corpus parsing and GLUE readers (torch-free: also built with ASan/UBSan in the sanitize tier).
#include <filesystem>
#include <map>
#include <set>

#include "corpora/corpus.h"
#include "corpora/glue.h"
#include "helpers.h"
#include "text/lines.h"
#include "util/error.h"

namespace ropelab {
namespace {

using test::TempDir;
using test::write;

// ---- corpus parsing (a sample of real diatheke OSIS output, trimmed)

TEST(Corpus, ParsesOsisKeysJoinsWordsDropsHeadings) {
  std::string osis =
      "Genesis 1:1: <w>In</w> <w>the</w> <w>beginning</w>, <w>God</w><w>created</w> "
      "<w>the</w> <w>heavens</w>.<milestone type=\"line\"/>\n"
      "Psalms 2:12: <w>Kiss</w> the son &amp; be <w>wise</w>. <milestone type=\"line\"/>\n"
      "A <w>Psalm</w> of <w>David</w>, when he <w>fled</w>.   Psalms 3:1: <w>LORD</w>, how "
      "are they <w>increased</w>!\n"
      "you are cursed above all livestock,\n"
      "and above every animal. <milestone type=\"line\"/>\n"
      "<title canonical=\"true\" type=\"psalm\">A praise psalm.</title> <lg sID=\"x\"/>Tobit 6:18: "
      "<w>Apocrypha</w> text.\n"
      "I John 1:1: ¶ That which was from the beginning .\n"
      "(engWEB2015eb)\n";
  auto v = corpora::parse_diatheke_osis(osis, "sample");
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].key(), "Genesis 1:1");
  EXPECT_EQ(v[0].text, "In the beginning, God created the heavens.");
  EXPECT_EQ(v[1].text, "Kiss the son & be wise.");  // heading of Psalm 3 not glued on
  EXPECT_EQ(v[2].key(), "Psalms 3:1");
  EXPECT_EQ(
      v[2].text,
      "LORD, how are they increased! you are cursed above all livestock, and above every animal.");
  EXPECT_EQ(v[3].book, "I John");  // not "John"; Tobit (not canonical) dropped
  EXPECT_EQ(v[3].text, "That which was from the beginning.");
  EXPECT_THROW(corpora::parse_diatheke_osis("nothing here", "x"), UserError);
  // Found by fuzzing: chapter or verse 0 (SWORD's introduction slots) is not a verse.
  auto intro = corpora::parse_diatheke_osis(
      "Genesis 1:0: <w>Introduction</w>\nGenesis 0:0: Book intro\nGenesis 1:1: <w>In</w>\n", "x");
  ASSERT_EQ(intro.size(), 1u);
  EXPECT_EQ(intro[0].key(), "Genesis 1:1");
  // Found by fuzzing: a number too long for a chapter is text, not a key (it overflowed stoi).
  auto big = corpora::parse_diatheke_osis("Genesis 1:1: a Genesis 17777777777777:0: b\n", "x");
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].text, "a Genesis 17777777777777:0: b");
}

TEST(Corpus, SplitsAreByBookAndCoverTheCanon) {
  std::map<std::string, int> n;
  for (const auto& b : corpora::canonical_books()) n[corpora::split_of_book(b)]++;
  EXPECT_EQ(corpora::canonical_books().size(), 66u);
  EXPECT_EQ(n["valid"], 6);
  EXPECT_EQ(n["test"], 5);
  EXPECT_EQ(n["train"], 55);
}

TEST(Corpus, Utf8Validation) {
  EXPECT_EQ(text::invalid_utf8_at("plain ascii"), -1);
  EXPECT_EQ(text::invalid_utf8_at("caf\xC3\xA9 \xE2\x80\x94 ok"), -1);
  EXPECT_EQ(text::invalid_utf8_at("bad \xC3 here"), 4);
  EXPECT_EQ(text::invalid_utf8_at("\xFF"), 0);
  // What strict decoders refuse: overlong forms, surrogates, code points beyond U+10FFFF.
  EXPECT_EQ(text::invalid_utf8_at("a\xC0\xAF"), 1);
  EXPECT_EQ(text::invalid_utf8_at("a\xE0\x9D\xA4"), 1);
  EXPECT_EQ(text::invalid_utf8_at("a\xED\xA0\x80"), 1);
  EXPECT_EQ(text::invalid_utf8_at("a\xF0\x8F\xBF\xBF"), 1);
  EXPECT_EQ(text::invalid_utf8_at("a\xF4\x90\x80\x80"), 1);
  EXPECT_EQ(text::invalid_utf8_at("\xE0\xA0\x80 \xED\x9F\xBF \xF4\x8F\xBF\xBF"), -1);  // edges
}

// ---- GLUE layouts

struct GlueCase {
  const char* task;
  const char* file;
  const char* text;
  size_t n;
  const char* a0;
  const char* b0;
  float label0;
};

TEST(Glue, ReadsAllNineLayouts) {
  TempDir d;
  std::vector<GlueCase> cases = {
      {"CoLA", "train.tsv",
       "gj04\t1\t\tOur friends won't buy this analysis.\r\ngj04\t0\t*\tOne more pseudo "
       "generalization.\n",
       2, "Our friends won't buy this analysis.", "", 1},
      {"CoLA", "test.tsv", "index\tsentence\n0\tBill whistled past the house.\n", 1,
       "Bill whistled past the house.", "", -1},
      {"SST-2", "train.tsv",
       "sentence\tlabel\nhide new secretions \" from the parental units \t0\n", 1,
       "hide new secretions \" from the parental units ", "", 0},
      {"SST-2", "test.tsv", "index\tsentence\n0\tuneasy mishmash of styles\n", 1,
       "uneasy mishmash of styles", "", -1},
      {"MRPC", "train.tsv",
       "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t702876\t702977\tAmrozi accused his "
       "\"brother\"\tReferring to him\n",
       1, "Amrozi accused his \"brother\"", "Referring to him", 1},
      {"STS-B", "dev.tsv",
       "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
       "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man with a hard hat is dancing.\tA "
       "man wearing a hard hat is dancing.\t5.000\n",
       1, "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0f},
      {"QQP", "dev.tsv",
       "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n40\t1\t2\tWhy is the sky blue?\tWhat "
       "makes the sky blue?\t1\n",
       1, "Why is the sky blue?", "What makes the sky blue?", 1},
      {"QQP", "test.tsv", "id\tquestion1\tquestion2\n0\tHow?\tWhy?\n", 1, "How?", "Why?", -1},
      {"MNLI", "dev_matched.tsv",
       "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_"
       "parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_"
       "label\n"
       "0\t63735\t63735n\tslate\t(x)\t(y)\t(X)\t(Y)\tThe new rights are nice enough\tEveryone "
       "really likes the newest "
       "benefits\tneutral\tentailment\tneutral\tneutral\tneutral\tneutral\n",
       1, "The new rights are nice enough", "Everyone really likes the newest benefits", 1},
      {"QNLI", "train.tsv",
       "index\tquestion\tsentence\tlabel\n0\tWhen?\tIn 1990.\tnot_entailment\n", 1, "When?",
       "In 1990.", 1},
      {"RTE", "train.tsv",
       "index\tsentence1\tsentence2\tlabel\n0\tA dog barks.\tAn animal makes noise.\tentailment\n",
       1, "A dog barks.", "An animal makes noise.", 0},
      {"WNLI", "train.tsv",
       "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tThe pin was stuck.\t1\n", 1,
       "I stuck a pin.", "The pin was stuck.", 1},
  };
  std::set<std::string> tasks;
  for (const auto& c : cases) {
    std::string dir = d.file(c.task);
    std::filesystem::create_directories(dir);
    auto f = write(dir + "/" + c.file, c.text);
    auto gf = corpora::read_glue_tsv(f, corpora::glue_task(c.task));
    ASSERT_EQ(gf.examples.size(), c.n) << c.task << " " << c.file;
    EXPECT_EQ(gf.examples[0].a, c.a0) << c.task;
    EXPECT_EQ(gf.examples[0].b, c.b0) << c.task;
    EXPECT_FLOAT_EQ(gf.examples[0].label, c.label0) << c.task;
    tasks.insert(corpora::glue_task(c.task).name);
  }
  EXPECT_EQ(tasks.size(), 9u);
  EXPECT_EQ(corpora::glue_file_name(corpora::glue_task("mnli"), "dev"), "dev_matched.tsv");
  EXPECT_EQ(corpora::glue_task("sst2").name, "SST-2");
  EXPECT_THROW(corpora::glue_task("squad"), UserError);
}

TEST(Glue, BadRowsNameFileAndLine) {
  TempDir d;
  std::filesystem::create_directories(d.file("QQP"));
  auto f = write(d.file("rte.tsv"),
                 "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tonly two\n");
  try {
    corpora::read_glue_tsv(f, corpora::glue_task("RTE"));
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rte.tsv:3: expected 4 tab-separated columns, found 2"),
              std::string::npos)
        << e.what();
  }
  auto g = write(d.file("bad_label.tsv"), "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n");
  EXPECT_THROW(corpora::read_glue_tsv(g, corpora::glue_task("RTE")), UserError);
  // QQP's train file: malformed rows are skipped and counted, as reference loaders do.
  auto q = write(
      d.file("QQP/train.tsv"),
      "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t1\t2\ta?\tb?\t0\n2\t3\tbroken row\n");
  auto gf = corpora::read_glue_tsv(q, corpora::glue_task("QQP"));
  EXPECT_EQ(gf.examples.size(), 1u);
  EXPECT_EQ(gf.skipped_rows, 1);
}

TEST(Glue, DescribedLayoutsFindTheirColumnsByHeaderName) {
  TempDir d;
  corpora::GlueTask t;
  t.name = "reviews", t.label_names = {"neg", "pos"}, t.pair = true;
  t.col_a = "title", t.col_b = "body", t.col_label = "stars";
  // Extra columns in any order; a CRLF file; the label names map to their positions.
  auto f = write(d.file("train.tsv"),
                 "id\tstars\tbody\tuser\ttitle\r\n7\tpos\tgreat read\tu1\tA book\r\n"
                 "8\tneg\tdull\tu2\tAnother\r\n");
  auto gf = corpora::read_glue_tsv(f, t);
  ASSERT_EQ(gf.examples.size(), 2u);
  EXPECT_TRUE(gf.labeled);
  EXPECT_EQ(gf.examples[0].a, "A book");
  EXPECT_EQ(gf.examples[0].b, "great read");
  EXPECT_EQ(gf.examples[0].label, 1.0f);
  EXPECT_EQ(gf.examples[1].label, 0.0f);
  EXPECT_EQ(gf.examples[1].id, "8");
  EXPECT_EQ(gf.examples[1].line, 3);
  // A test file without the label column reads as unlabeled.
  auto u = write(d.file("test.tsv"), "title\tbody\nX\tY\n");
  EXPECT_FALSE(corpora::read_glue_tsv(u, t).labeled);
  // A missing text column names the file, the line and the column.
  auto bad = write(d.file("bad.tsv"), "title\tstars\nX\tpos\n");
  try {
    corpora::read_glue_tsv(bad, t);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.tsv:1: no column 'body' in the header"),
              std::string::npos)
        << e.what();
  }
  // An unknown label names its line; so does a short row.
  auto lab = write(d.file("lab.tsv"), "title\tbody\tstars\nX\tY\tpos\nX\tY\tmeh\n");
  try {
    corpora::read_glue_tsv(lab, t);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("lab.tsv:3: label 'meh' is not one of: neg, pos"),
              std::string::npos)
        << e.what();
  }
  // Regression: the label is a number.
  t.label_names.clear(), t.regression = true;
  auto reg = write(d.file("reg.tsv"), "title\tbody\tstars\nX\tY\t4.5\n");
  EXPECT_FLOAT_EQ(corpora::read_glue_tsv(reg, t).examples[0].label, 4.5f);
  // strtof reads "nan" and "inf", which would reach the loss and the Pearson/Spearman metrics
  // (found while writing the fuzz target's finite-label property, tests/fuzz/fuzz_glue_tsv.cpp).
  for (const char* label : {"nan", "-inf", "1e99"}) {
    std::string body = std::string("title\tbody\tstars\nX\tY\t") + label + "\n";
    try {
      corpora::parse_glue_tsv(body, "scores.tsv", t);
      FAIL() << label;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("scores.tsv:2: label '" + std::string(label) +
                                           "' is not a (finite) number"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Glue, RankingLayoutRoundTripsThroughItsWriter) {
  TempDir d;
  corpora::GlueTask t;
  t.name = "scm", t.label_names = {"B", "C"}, t.pair = true;
  t.col_a = "A", t.col_b = "B", t.col_c = "C", t.col_label = "label";
  std::vector<corpora::GlueExample> ex(2);
  ex[0].a = "a0", ex[0].b = "b0", ex[0].c = "c0", ex[0].label = 0;
  ex[1].a = "a1", ex[1].b = "b1", ex[1].c = "c1", ex[1].label = 1;
  auto text = corpora::write_glue_tsv(t, ex, true);
  EXPECT_EQ(text, "A\tB\tC\tlabel\na0\tb0\tc0\tB\na1\tb1\tc1\tC\n");
  auto back = corpora::read_glue_tsv(write(d.file("dev.tsv"), text), t);
  ASSERT_EQ(back.examples.size(), 2u);
  EXPECT_EQ(back.examples[1].c, "c1");
  EXPECT_EQ(back.examples[1].label, 1.0f);
  // Unlabeled: an index column and no label.
  EXPECT_EQ(corpora::write_glue_tsv(t, ex, false),
            "index\tA\tB\tC\n0\ta0\tb0\tc0\n1\ta1\tb1\tc1\n");
}

}  // namespace
}  // namespace ropelab
