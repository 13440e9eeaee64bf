// The byte-level BPE tokenizer against the golden ids and pieces of
// scripts/golden/bpe_reference.py (an independent Python implementation that runs the
// pre-tokenizer regexes through the `regex` module): Llama 3's split with ignore_merges, Qwen2's
// with NFC, GPT-2's; contractions in any case, digit runs, whitespace runs and newlines,
// accents (composed and not), CJK, Hangul, emoji, added tokens in the text.
#include "tokenizers/bpe.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::tokenizers {
namespace {

const std::string kBpeDir = std::string(ROPELAB_SOURCE_DIR) + "/tests/data/bpe";

BpeSplit split_of(const std::string& style) {
  return style == "llama3"  ? BpeSplit::kLlama3
         : style == "qwen2" ? BpeSplit::kQwen2
                            : BpeSplit::kGpt2;
}

TEST(Bpe, MatchesTheReferenceIdsAndPiecesOnEveryTestString) {
  auto cases = nlohmann::json::parse(fs::read_file(kBpeDir + "/cases.json"));
  ASSERT_EQ(cases.size(), 42u);
  std::map<std::string, std::unique_ptr<BpeTokenizer>> toks;
  size_t tokens = 0;
  for (const auto& c : cases) {
    const auto style = c["tokenizer"].get<std::string>();
    const auto text = c["text"].get<std::string>();
    SCOPED_TRACE(style + ": " + text);
    auto& tok = toks[style];
    if (!tok) tok = std::make_unique<BpeTokenizer>(kBpeDir + "/" + style + "/tokenizer.json");
    EXPECT_EQ(bpe_pre_tokenize(text, split_of(style)), c["pieces"].get<std::vector<std::string>>());
    auto ids = tok->encode_original(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
    tokens += ids.size();
  }
  EXPECT_GT(tokens, 600u);  // not vacuous
}

TEST(Bpe, RenumberedIdsDecodeBackToTheText) {
  const std::string path = kBpeDir + "/llama3/tokenizer.json";
  BpeTokenizer plain(path);
  const int32_t bos = plain.id_of("<|begin_of_text|>"), eos = plain.id_of("<|end_of_text|>");
  ASSERT_GE(bos, 0);
  // A padded embedding (8 rows past the tokenizer) gives the missing specials their ids.
  const int64_t V = plain.size() + 8;
  std::vector<int64_t> fillers;
  for (int64_t i = plain.size(); i < V; ++i) fillers.push_back(i);
  auto order = special_first_order(V, {-1, -1, bos, eos, -1, -1, -1}, fillers);
  BpeTokenizer tok(path, order);
  EXPECT_EQ(tok.vocab_size(), V);
  EXPECT_EQ(tok.encode("<|begin_of_text|>"), (std::vector<int32_t>{Special::kBos}));
  EXPECT_EQ(order[Special::kPad], plain.size());  // a padding row, never produced
  for (const std::string text :
       {"In the beginning, 12345 caf\u00e9 \U0001F600!\n\n  x", "line one\nline two"}) {
    auto ids = tok.encode(text);
    auto orig = plain.encode_original(text);
    ASSERT_EQ(ids.size(), orig.size());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(order[static_cast<size_t>(ids[i])], orig[i]);
    EXPECT_EQ(tok.decode(ids), text);
  }
  EXPECT_EQ(tok.decode(tok.encode("<|begin_of_text|>Hi<|end_of_text|>")), "Hi");
}

TEST(Bpe, UnsupportedTokenizersNameTheFileAndTheKey) {
  auto j = nlohmann::json::parse(fs::read_file(kBpeDir + "/llama3/tokenizer.json"));
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  // clang-format off: versions 14 and 19 lay out these lambdas differently
  std::vector<Case> cases = {
      {[](nlohmann::json& t) { t["model"]["type"] = "WordPiece"; }, "model.type"},
      {[](nlohmann::json& t) { t["model"]["byte_fallback"] = true; }, "model.byte_fallback"},
      {[](nlohmann::json& t) { t["model"]["merges"] = {"abc"}; }, "model.merges"},
      {[](nlohmann::json& t) {
         t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
       },
       "pre_tokenizer"},
      {[](nlohmann::json& t) {
         t["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer"},
      {[](nlohmann::json& t) { t["added_tokens"][0]["lstrip"] = true; }, "lstrip"},
  };
  // clang-format on
  test::TempDir d;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expect);
    auto t = j;
    c.edit(t);
    test::write(d.file("tokenizer.json"), t.dump());
    try {
      BpeTokenizer tok(d.file("tokenizer.json"));
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(d.file("tokenizer.json")), std::string::npos);
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
  test::write(d.file("tokenizer.json"), "{\"model\": ");
  EXPECT_THROW(BpeTokenizer(d.file("tokenizer.json")), UserError);
}

}  // namespace
}  // namespace ropelab::tokenizers
