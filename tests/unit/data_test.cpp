// Corpora, GLUE readers, HDF5 token datasets and batch streams.
#include <cmath>
#include <filesystem>
#include <set>

#include "corpora/corpus.h"
#include "corpora/glue.h"
#include "data/batches.h"
#include "data/prepare.h"
#include "data/tokens.h"
#include "helpers.h"
#include "tokenizers/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"

namespace ropelab {
namespace {

using test::TempDir;
using test::write;
using tokenizers::Special;

// ---- HDF5 token datasets

data::TokenDataset tiny_lm(int docs, int len, int vocab = 50) {
  auto ds = data::empty_dataset(data::DataKind::kLm);
  ds.split = "train";
  ds.tokenizer = "byte-v1";
  ds.tokenizer_kind = "byte";
  ds.vocab_size = vocab;
  ds.source_hash = "x";
  for (int d = 0; d < docs; ++d) {
    std::vector<int32_t> seq;
    for (int t = 0; t < len + d % 3; ++t)
      seq.push_back(Special::kCount + (d * 7 + t) % (vocab - Special::kCount));
    ds.lm().text.push(seq);
  }
  return ds;
}

TEST(Tokens, RoundTripAndValidation) {
  TempDir d;
  auto ds = tiny_lm(5, 10);
  data::write_tokens(d.file("a.h5"), ds);
  auto back = data::read_tokens(d.file("a.h5"), data::DataKind::kLm);
  EXPECT_TRUE(back.lm().text.on_disk());  // read in place, not loaded
  EXPECT_EQ(back.lm().text.to_ragged().tokens, ds.lm().text.to_ragged().tokens);
  EXPECT_EQ(back.lm().text.to_ragged().offsets, ds.lm().text.to_ragged().offsets);
  for (int64_t i = 0; i < ds.lm().text.size(); ++i)
    EXPECT_EQ(back.lm().text.sequence(i), ds.lm().text.sequence(i));
  EXPECT_EQ(back.vocab_size, 50);
  // Truncated file.
  std::string bytes = fs::read_file(d.file("a.h5"));
  write(d.file("trunc.h5"), bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(data::read_tokens(d.file("trunc.h5")), UserError);
  // Not HDF5 at all / empty.
  write(d.file("text.h5"), "hello");
  EXPECT_THROW(data::read_tokens(d.file("text.h5")), UserError);
  // A foreign HDF5 file (no ropelab attributes).
  {
    auto f = h5::create_file(d.file("foreign.h5"));
    h5::write_i32(f.id(), "x", {1, 2, 3});
  }
  try {
    data::read_tokens(d.file("foreign.h5"));
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not a ropelab token dataset"), std::string::npos);
  }
  // Ids out of the vocabulary.
  auto bad = ds;
  auto bad_ids = ds.lm().text.to_ragged();
  bad_ids.tokens[3] = 50;
  bad.lm().text = data::Documents(bad_ids);
  data::write_tokens(d.file("bad.h5"), bad);
  try {
    // A mapped split checks the ids it reads.
    (void)data::read_tokens(d.file("bad.h5")).lm().text.sequence(0);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  // Wrong kind, for the file and for a typed view.
  EXPECT_THROW(data::read_tokens(d.file("a.h5"), data::DataKind::kGlue), UserError);
  try {
    (void)back.glue();
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'train' split holds lm data, this needs glue data"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(data::read_tokens(d.file("missing.h5")), UserError);
}

TEST(Tokens, FailedWriteLeavesTheOldFile) {
  TempDir d;
  auto ds = tiny_lm(3, 5);
  data::write_tokens(d.file("a.h5"), ds);
  std::string before = fs::read_file(d.file("a.h5"));
  EXPECT_THROW(
      fs::commit_atomic(d.file("a.h5"), [](const std::string&) { throw UserError("boom"); }),
      UserError);
  EXPECT_EQ(fs::read_file(d.file("a.h5")), before);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.path())) (void)e, ++files;
  EXPECT_EQ(files, 1);  // no temp file left behind
}

// ---- batch streams

TEST(Streams, LmWindowsCoverTheStreamOncePerEpoch) {
  auto ds = tiny_lm(20, 30);
  data::StreamOptions o;
  o.seq_len = 16;
  o.batch_size = 4;
  o.seed = 7;
  auto s = data::make_lm_stream(ds, o);
  int64_t total = ds.lm().text.num_tokens() + ds.lm().text.size();
  int64_t windows = (total - 1) / 16;
  EXPECT_EQ(s->batches_per_epoch(), windows / 4);
  // Reconstruct the stream positions each window covers: each appears once.
  std::multiset<std::vector<int64_t>> seen;
  for (int64_t i = 0; i < s->batches_per_epoch(); ++i) {
    auto b = s->batch(0, i);
    ASSERT_EQ(b.input_BT.size(1), 16);
    // target is input shifted by one
    EXPECT_TRUE(torch::equal(b.input_BT.slice(1, 1), b.target_BT.slice(1, 0, 15)));
    for (int64_t r = 0; r < b.input_BT.size(0); ++r) {
      auto row = b.input_BT[r];
      seen.insert(std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + 16));
    }
  }
  // Unshuffled evaluation order: consecutive windows that tile the stream.
  o.shuffle = false;
  auto e = data::make_lm_stream(ds, o);
  EXPECT_EQ(e->batches_per_epoch(), (windows + 3) / 4);
  std::multiset<std::vector<int64_t>> all;
  std::vector<int64_t> tiled;
  for (int64_t i = 0; i < e->batches_per_epoch(); ++i) {
    auto b = e->batch(0, i);
    for (int64_t r = 0; r < b.input_BT.size(0); ++r) {
      auto row = b.input_BT[r];
      std::vector<int64_t> v(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + 16);
      all.insert(v);
      tiled.insert(tiled.end(), v.begin(), v.end());
    }
  }
  EXPECT_EQ(static_cast<int64_t>(tiled.size()), windows * 16);
  // The shuffled epoch used a subset (full batches only) of exactly these windows, no repeats.
  for (const auto& w : seen) EXPECT_GE(all.count(w), seen.count(w));
  EXPECT_EQ(static_cast<int64_t>(seen.size()), (windows / 4) * 4);
  // Different epochs, different order; same epoch, same batch.
  EXPECT_FALSE(torch::equal(s->batch(0, 0).input_BT, s->batch(1, 0).input_BT));
  auto again = data::make_lm_stream(ds, [&] {
    auto x = o;
    x.shuffle = true;
    return x;
  }());
  EXPECT_TRUE(torch::equal(s->batch(1, 2).input_BT, again->batch(1, 2).input_BT));
}

TEST(Streams, ResumedStreamContinuesExactly) {
  auto ds = tiny_lm(30, 40, 200);
  data::StreamOptions o;
  o.seq_len = 32;
  o.batch_size = 2;
  o.seed = 3;
  auto a = data::make_mlm_stream(ds, o);
  auto b = data::make_mlm_stream(ds, o);  // a "restarted" process
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t i = 0; i < a->batches_per_epoch(); ++i) {
      auto x = a->batch(e, i), y = b->batch(e, i);
      ASSERT_TRUE(torch::equal(x.input_BT, y.input_BT));
      ASSERT_TRUE(torch::equal(x.target_BT, y.target_BT));
    }
}

TEST(Streams, ShardsAreDisjointAndComplete) {
  auto ds = tiny_lm(20, 30);
  data::StreamOptions o;
  o.seq_len = 8;
  o.batch_size = 1;
  o.shuffle = false;
  auto whole = data::make_lm_stream(ds, o);
  // Rank r of 3 takes windows r, r+3, r+6, ...: interleaving the ranks' batches must give
  // back the unsharded order exactly (every window once, none twice).
  std::vector<std::unique_ptr<data::BatchStream>> ranks;
  for (int r = 0; r < 3; ++r) {
    o.rank = r;
    o.world = 3;
    ranks.push_back(data::make_lm_stream(ds, o));
  }
  int64_t total = 0;
  for (const auto& rs : ranks) total += rs->batches_per_epoch();
  ASSERT_EQ(total, whole->batches_per_epoch());
  for (int64_t i = 0; i < whole->batches_per_epoch(); ++i) {
    auto want = whole->batch(0, i).input_BT;
    auto got = ranks[i % 3]->batch(0, i / 3).input_BT;
    ASSERT_TRUE(torch::equal(got, want)) << "window " << i;
  }
}

// Data parallelism: at every training step, W ranks with batch b take exactly the rows (MLM:
// with the same masks) one process takes with batch W*b, and agree on the epoch length.
std::multiset<std::vector<int64_t>> rows_of(const data::Batch& b) {
  std::multiset<std::vector<int64_t>> out;
  auto both = torch::cat({b.input_BT, b.target_BT}, 1).contiguous();
  for (int64_t r = 0; r < both.size(0); ++r)
    out.insert(std::vector<int64_t>(both[r].data_ptr<int64_t>(),
                                    both[r].data_ptr<int64_t>() + both.size(1)));
  return out;
}

TEST(Streams, RanksTogetherTakeTheGlobalBatch) {
  auto ds = tiny_lm(40, 37, 300);
  for (bool mlm : {false, true}) {
    auto make = mlm ? data::make_mlm_stream : data::make_lm_stream;
    data::StreamOptions o;
    o.seq_len = 12;
    o.seed = 5;
    o.batch_size = 3 * 2;
    auto whole = make(ds, o);
    std::vector<std::unique_ptr<data::BatchStream>> ranks;
    o.batch_size = 2;
    o.world = 3;
    for (int r = 0; r < 3; ++r) {
      o.rank = r;
      ranks.push_back(make(ds, o));
      ASSERT_EQ(ranks.back()->batches_per_epoch(), whole->batches_per_epoch()) << "rank " << r;
    }
    ASSERT_GT(whole->batches_per_epoch(), 3);
    for (int64_t e = 0; e < 2; ++e)
      for (int64_t i = 0; i < whole->batches_per_epoch(); ++i) {
        std::multiset<std::vector<int64_t>> got;
        for (const auto& rs : ranks) got.merge(rows_of(rs->batch(e, i)));
        ASSERT_EQ(got, rows_of(whole->batch(e, i)))
            << (mlm ? "mlm" : "clm") << " epoch " << e << " batch " << i;
      }
  }
}

TEST(Streams, TranslationRanksTakeConsecutiveBudgetBatches) {
  auto ds = data::empty_dataset(data::DataKind::kParallel);
  ds.vocab_size = 100;
  for (int i = 0; i < 301; ++i) {
    ds.parallel().src.push(std::vector<int32_t>(1 + (i * 37) % 50, 10 + i % 7));
    ds.parallel().tgt.push(std::vector<int32_t>(1 + (i * 11) % 60, 11 + i % 5));
  }
  data::StreamOptions o;
  o.seq_len = 64;
  o.max_tokens = 400;
  auto whole = data::make_translation_stream(ds, o);
  o.world = 2;
  o.rank = 0;
  auto r0 = data::make_translation_stream(ds, o);
  o.rank = 1;
  auto r1 = data::make_translation_stream(ds, o);
  // A step of 2 ranks is the single process's two consecutive batches (grad_accum 2); both
  // ranks have the same number of steps, the odd batch out is dropped.
  ASSERT_EQ(r0->batches_per_epoch(), whole->batches_per_epoch() / 2);
  ASSERT_EQ(r1->batches_per_epoch(), r0->batches_per_epoch());
  for (int64_t i = 0; i < r0->batches_per_epoch(); ++i) {
    ASSERT_TRUE(torch::equal(r0->batch(1, i).src_BS, whole->batch(1, 2 * i).src_BS));
    ASSERT_TRUE(torch::equal(r1->batch(1, i).src_BS, whole->batch(1, 2 * i + 1).src_BS));
  }
}

TEST(Streams, MlmMaskingStatistics) {
  auto ds = tiny_lm(1000, 100, 1000);
  data::StreamOptions o;
  o.seq_len = 128;
  o.batch_size = 32;
  o.seed = 11;
  auto s = data::make_mlm_stream(ds, o);
  int64_t eligible = 0, selected = 0, masked = 0, random = 0, kept = 0, special_selected = 0;
  for (int64_t i = 0; i < s->batches_per_epoch(); ++i) {
    auto b = s->batch(0, i);
    auto sel = b.target_BT != -100;
    selected += sel.sum().item<int64_t>();
    EXPECT_EQ(b.num_targets, sel.sum().item<int64_t>());
    // Original tokens at every position: targets where selected, inputs elsewhere.
    auto orig = torch::where(sel, b.target_BT, b.input_BT);
    eligible += (orig >= Special::kCount).sum().item<int64_t>();
    special_selected += (sel & (orig < Special::kCount)).sum().item<int64_t>();
    masked += (sel & (b.input_BT == Special::kMask)).sum().item<int64_t>();
    kept += (sel & (b.input_BT == b.target_BT)).sum().item<int64_t>();
    random +=
        (sel & (b.input_BT != Special::kMask) & (b.input_BT != b.target_BT)).sum().item<int64_t>();
    EXPECT_EQ(b.input_BT.index({torch::indexing::Slice(), 0}).eq(Special::kCls).all().item<bool>(),
              true);
  }
  ASSERT_GT(selected, 10000);
  double p = static_cast<double>(selected) / static_cast<double>(eligible);
  EXPECT_NEAR(p, 0.15, 0.01);
  EXPECT_EQ(special_selected, 0);
  double fs = static_cast<double>(selected);
  EXPECT_NEAR(masked / fs, 0.80, 0.02);
  // A random replacement can draw the original token (1/vocab): it then counts as kept.
  EXPECT_NEAR(random / fs, 0.10, 0.02);
  EXPECT_NEAR(kept / fs, 0.10, 0.02);
}

TEST(Streams, TranslationBatchesRespectTheTokenBudget) {
  auto ds = data::empty_dataset(data::DataKind::kParallel);
  ds.vocab_size = 100;
  for (int i = 0; i < 300; ++i) {
    std::vector<int32_t> a(1 + (i * 37) % 50, 10), b(1 + (i * 11) % 60, 11);
    ds.parallel().src.push(a);
    ds.parallel().tgt.push(b);
  }
  data::StreamOptions o;
  o.seq_len = 64;
  o.max_tokens = 400;
  auto s = data::make_translation_stream(ds, o);
  int64_t pairs = 0;
  for (int64_t i = 0; i < s->batches_per_epoch(); ++i) {
    auto b = s->batch(0, i);
    int64_t B = b.src_BS.size(0);
    EXPECT_LE(B * std::max(b.src_BS.size(1), b.input_BT.size(1)), 400);
    EXPECT_TRUE(
        b.input_BT.index({torch::indexing::Slice(), 0}).eq(Special::kBos).all().item<bool>());
    EXPECT_EQ((b.target_BT == Special::kEos).sum().item<int64_t>(), B);
    pairs += B;
  }
  EXPECT_EQ(pairs, 300);  // every pair exactly once per epoch
}

TEST(Streams, GlueBatchesHaveClsSepSegments) {
  auto ds = data::empty_dataset(data::DataKind::kGlue);
  ds.vocab_size = 100;
  ds.num_labels = 2;
  for (int i = 0; i < 10; ++i) {
    ds.glue().a.push(std::vector<int32_t>(3 + i, 20));
    ds.glue().b.push(std::vector<int32_t>(2, 30));
    ds.glue().labels.push_back(static_cast<float>(i % 2));
  }
  data::StreamOptions o;
  o.seq_len = 8;
  o.batch_size = 10;
  o.shuffle = false;
  auto b = data::make_glue_stream(ds, o)->batch(0, 0);
  EXPECT_EQ(b.input_BT.size(1), 8);  // truncated to seq_len
  auto row = b.input_BT[9];          // a=12 tokens, b=2: truncated longest-first to 3 + 2
  EXPECT_EQ(row[0].item<int64_t>(), Special::kCls);
  EXPECT_EQ(row[4].item<int64_t>(), Special::kSep);
  EXPECT_EQ(row[7].item<int64_t>(), Special::kSep);
  EXPECT_EQ(b.segment_BT[9][5].item<int64_t>(), 1);
  EXPECT_EQ(b.segment_BT[9][3].item<int64_t>(), 0);
  EXPECT_EQ(b.label_B[1].item<int64_t>(), 1);
  EXPECT_EQ(b.pad_BT[0].sum().item<int64_t>(), 1 + 3 + 1 + 2 + 1);
}

// ---- the data plan: resolved once, before anything is read or written

TEST(Plan, ResolvesKindInputsTokenizerAndSplitsWithoutTouchingTheDisk) {
  TempDir d;
  config::DataConfig c;
  c.prepared_dir = d.file("prep");
  c.source = config::DataSource::kBibleMrpc;
  auto p = data::plan(c, 128);
  EXPECT_EQ(p.kind, data::DataKind::kGlue);
  EXPECT_TRUE(p.builtin);
  EXPECT_EQ(p.glue.name, "MRPC");
  ASSERT_EQ(p.inputs.size(), 3u);
  EXPECT_EQ(p.inputs[0].split, "train");
  EXPECT_EQ(p.inputs[1].split, "valid");
  EXPECT_TRUE(p.inputs[2].optional);  // the test file is used when present
  EXPECT_EQ(p.text_dir, d.file("prep") + "/text/bible-mrpc");
  EXPECT_EQ(p.tokenizer_path, p.out_dir + "/tokenizer.model");
  EXPECT_EQ(p.splits, (std::vector<std::string>{"train", "valid", "test"}));
  EXPECT_FALSE(std::filesystem::exists(d.file("prep")));  // nothing was written

  // User parallel text: source and target files per split, from the suffixes.
  c.source = config::DataSource::kParallel;
  c.train = d.file("train");
  c.valid = d.file("valid");
  c.source_suffix = "de";
  c.target_suffix = "en";
  p = data::plan(c, 128);
  EXPECT_EQ(p.kind, data::DataKind::kParallel);
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.inputs[1].files, (std::vector<std::string>{c.valid + ".de", c.valid + ".en"}));

  // Synthetic sources: the generator's bounds are checked here, naming the key.
  c = config::DataConfig{};
  c.source = config::DataSource::kSyntheticCopy;
  c.tokenizer.type = config::TokenizerType::kSynthetic;
  c.synthetic.size = 20;
  auto expect_error = [&](int64_t max_len, const std::string& needle) {
    try {
      data::plan(c, max_len);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(16, "task.seq_len: seq_len (16) is shorter than the longest synthetic-copy");
  EXPECT_EQ(data::plan(c, 4096).kind, data::DataKind::kSynthetic);
  c.source = config::DataSource::kSyntheticMqar;
  c.synthetic.size = 200;
  expect_error(1 << 20, "data.synthetic.size: synthetic-mqar needs a size in [1, 128]");
}

// ---- prepare: user data and its errors

TEST(Prepare, UserTextIsIdempotentAndErrorsNameTheFile) {
  TempDir d;
  std::string text;
  for (int i = 0; i < 50; ++i) text += "line number " + std::to_string(i) + " of some text\n";
  config::DataConfig c;
  c.source = config::DataSource::kText;
  c.train = write(d.file("train.txt"), text);
  c.valid = write(d.file("valid.txt"), text.substr(0, 200));
  c.prepared_dir = d.file("prep");
  c.tokenizer.type = config::TokenizerType::kByte;
  auto p = data::prepare(data::plan(c, 128), 1);
  ASSERT_EQ(p.splits.size(), 2u);
  auto mtime = std::filesystem::last_write_time(p.splits["train"]);
  auto p2 = data::prepare(data::plan(c, 128), 1);  // up to date: not rewritten
  EXPECT_EQ(std::filesystem::last_write_time(p2.splits["train"]), mtime);
  write(c.train, text + "one more line\n");  // changed input: rebuilt
  auto p3 = data::prepare(data::plan(c, 128), 1);
  EXPECT_EQ(data::read_tokens(p3.splits["train"]).lm().text.size(), 51);

  auto expect_error = [&](config::DataConfig dc, const std::string& needle) {
    try {
      data::prepare(data::plan(dc, 128), 1);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto missing = c;
  missing.train = d.file("nope.txt");
  expect_error(missing, "nope.txt: no such file");
  auto empty = c;
  empty.train = write(d.file("empty.txt"), "");
  empty.valid = "";
  expect_error(empty, "empty.txt: no text");
  auto bad = c;
  bad.train = write(d.file("bad.txt"), "fine\nbad \xC3 byte\n");
  expect_error(bad, "bad.txt:2: invalid UTF-8");
  // A dataset made with another tokenizer is refused.
  tokenizers::SpmTrainOptions opt;
  opt.vocab_size = 40;
  tokenizers::train_spm(c.train, d.file("other"), opt);
  tokenizers::SpmTokenizer other(d.file("other.model"));
  EXPECT_THROW(data::load_split(p3, "train", other.fingerprint()), UserError);
}

}  // namespace
}  // namespace ropelab
