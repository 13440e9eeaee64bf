// The WordPiece tokenizer against the golden ids of scripts/golden/wordpiece_reference.py
// (an independent Python implementation of Hugging Face's fast BertTokenizer on Python's
// Unicode database): accents, CJK, emoji, whitespace runs, control characters, special tokens
// in the text, over-long and uncoverable words, in all four option settings.
#include "tokenizers/wordpiece.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::tokenizers {
namespace {

const std::string kWordPieceDir = std::string(ROPELAB_SOURCE_DIR) + "/tests/data/wordpiece";

std::string options_str(bool lower, bool strip) {
  return std::string(lower ? "lowercase" : "cased") + (strip ? ", accents stripped" : "");
}

TEST(WordPiece, MatchesTheReferenceIdsOnEveryTestString) {
  auto cases = nlohmann::json::parse(fs::read_file(kWordPieceDir + "/cases.json"));
  ASSERT_GE(cases.size(), 60u);
  std::map<std::pair<bool, bool>, std::unique_ptr<WordPieceTokenizer>> toks;
  int nonempty = 0;
  for (const auto& c : cases) {
    const bool lower = c["lowercase"].get<bool>(), strip = c["strip_accents"].get<bool>();
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE(text + " | " + options_str(lower, strip));
    auto& tok = toks[{lower, strip}];
    if (!tok)
      tok = std::make_unique<WordPieceTokenizer>(kWordPieceDir + "/vocab.txt",
                                                 WordPieceOptions{lower, strip});
    // ropelab ids back to vocab.txt's line numbers, which the reference gives.
    std::vector<int64_t> got;
    for (int32_t id : tok->encode(text)) got.push_back(tok->vocab_order()[static_cast<size_t>(id)]);
    EXPECT_EQ(got, c["ids"].get<std::vector<int64_t>>());
    if (!c["normalized"].is_null()) {
      EXPECT_EQ(bert_normalize(text, {lower, strip}), c["normalized"].get<std::string>());
    }
    nonempty += got.empty() ? 0 : 1;
  }
  EXPECT_GE(nonempty, 56);  // the cases are not vacuous
}

TEST(WordPiece, SpecialsSitAtRopelabsIdsAndDecodeJoinsContinuations) {
  WordPieceTokenizer tok(kWordPieceDir + "/vocab.txt", {});
  EXPECT_EQ(tok.encode("[CLS][SEP][MASK][PAD][UNK]"),
            (std::vector<int32_t>{Special::kCls, Special::kSep, Special::kMask, Special::kPad,
                                  Special::kUnk}));
  EXPECT_EQ(tok.piece(Special::kMask), "[MASK]");
  EXPECT_EQ(tok.vocab_size(), 206);
  auto ids = tok.encode("Unbelievably, [MASK] hello");
  EXPECT_EQ(tok.piece(ids[0]), "unbeliev");
  EXPECT_EQ(tok.piece(ids[1]), "##ably");
  EXPECT_EQ(tok.decode(ids), "unbelievably , hello");  // specials dropped
}

TEST(WordPiece, InvalidUtf8IsDroppedAsReplacementCharacters) {
  WordPieceTokenizer tok(kWordPieceDir + "/vocab.txt", {});
  EXPECT_EQ(tok.encode("hello\xff\xc3 world"), tok.encode("hello world"));
  EXPECT_EQ(bert_normalize("a\xe2\x82 b\xed\xa0\x80", {}), "a b");  // truncated; a surrogate
  EXPECT_EQ(bert_normalize("\xc0\xaf", {}), "");                    // overlong
}

TEST(WordPiece, NfdPutsCombiningMarksInCanonicalOrder) {
  // Two spacing combining marks (Mc, so stripping keeps them) out of order: U+1D16D (class 226)
  // before U+1D165 (216). NFD sorts them by class.
  EXPECT_EQ(bert_normalize("a\U0001D16D\U0001D165", {false, true}), "a\U0001D165\U0001D16D");
  EXPECT_EQ(bert_normalize("a\U0001D16D\U0001D165", {false, false}), "a\U0001D16D\U0001D165");
  EXPECT_EQ(bert_normalize("\u1EC7", {false, true}), "e");  // e + dot below + circumflex
  EXPECT_EQ(bert_normalize("\uD55C", {false, true}), "\u1112\u1161\u11AB");  // Hangul L V T
  EXPECT_EQ(bert_normalize("A\u0130\u03A3", {true, false}), "ai\u0307\u03C3");
}

TEST(WordPiece, BadVocabulariesNameTheFile) {
  test::TempDir d;
  auto expect_error = [&](const std::string& content, const std::string& what) {
    test::write(d.file("vocab.txt"), content);
    try {
      WordPieceTokenizer tok(d.file("vocab.txt"), {});
      ADD_FAILURE() << "accepted: " << what;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(d.file("vocab.txt")), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error("", "empty");
  expect_error("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", "has no [MASK]");
  EXPECT_THROW(WordPieceTokenizer(d.file("missing.txt"), {}), UserError);
}

}  // namespace
}  // namespace ropelab::tokenizers
