// Corpora in the formats researchers ship (text/documents.h): JSONL, gzip, zstd and shards,
// their bad inputs; lm splits written in a stream, resumed, and read in place (data/tokens.h,
// data/token_writer.h): the same batches as a split held in memory.
#include <zlib.h>
#include <zstd.h>

#include <filesystem>

#include "data/batches.h"
#include "data/prepare.h"
#include "data/token_writer.h"
#include "data/tokens.h"
#include "helpers.h"
#include "text/documents.h"
#include "tokenizers/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"

namespace ropelab {
namespace {

using test::TempDir;
using test::write;

std::string gzip(const std::string& s) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, s.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = static_cast<uInt>(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string zstd(const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

std::vector<std::string> all_docs(const std::vector<std::string>& files,
                                  text::DocumentOptions o = {}) {
  text::DocumentReader r(files, o);
  std::vector<std::string> out;
  for (text::Document d; r.next(&d);) out.push_back(d.text);
  return out;
}

std::string error_of(const std::vector<std::string>& files, text::DocumentOptions o = {}) {
  try {
    all_docs(files, o);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

text::DocumentOptions jsonl(const std::string& field = "text") {
  text::DocumentOptions o;
  o.format = text::Format::kJsonl;
  o.field = field;
  return o;
}

// A corpus big enough to cross the readers' 1 MiB buffers.
std::string many_lines(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += "document " + std::to_string(i) + " says " +
         std::string(static_cast<size_t>(i % 97), 'x') + "\n";
  return s;
}

TEST(Documents, PlainGzipAndZstdReadTheSame) {
  TempDir d;
  const std::string text = many_lines(40000);  // about 2.3 MB
  auto plain = all_docs({write(d.file("a.txt"), text)});
  ASSERT_EQ(plain.size(), 40000u);
  EXPECT_EQ(plain[12345], "document 12345 says " + std::string(12345 % 97, 'x'));
  EXPECT_EQ(all_docs({write(d.file("a.txt.gz"), gzip(text))}), plain);
  EXPECT_EQ(all_docs({write(d.file("a.txt.zst"), zstd(text))}), plain);
  // Compression is recognised by its magic bytes, not the name.
  EXPECT_EQ(all_docs({write(d.file("b.txt"), zstd(text))}), plain);
  // Concatenated members and frames (pigz, zstd -c a b > c) read as one stream.
  const std::string half1 = text.substr(0, text.size() / 2), half2 = text.substr(text.size() / 2);
  EXPECT_EQ(all_docs({write(d.file("m.gz"), gzip(half1) + gzip(half2))}), plain);
  EXPECT_EQ(all_docs({write(d.file("m.zst"), zstd(half1) + zstd(half2))}), plain);
  // CRLF line ends, blank lines dropped, a last line without a newline.
  EXPECT_EQ(all_docs({write(d.file("crlf.txt"), "one\r\n\r\ntwo\r\nthree")}),
            (std::vector<std::string>{"one", "two", "three"}));
  // A separator joins lines into documents.
  text::DocumentOptions sep;
  sep.separator = "---";
  EXPECT_EQ(all_docs({write(d.file("s.txt"), "a\nb\n---\n---\nc\n")}, sep),
            (std::vector<std::string>{"a\nb", "c"}));
}

TEST(Documents, JsonLinesTakeTheNamedField) {
  TempDir d;
  const std::string lines =
      "{\"text\": \"first doc\\nwith two lines\", \"id\": 1}\n"
      "\n"
      "{\"id\": 2, \"text\": \"caf\\u00e9 \\ud83d\\ude00\", \"meta\": {\"text\": \"no\"}}\n"
      "{\"text\": \"\"}\n"
      "{\"text\": \"third\", \"body\": \"other field\"}\n";
  const std::vector<std::string> want = {"first doc\nwith two lines",
                                         "caf\xc3\xa9 \xf0\x9f\x98\x80", "third"};
  EXPECT_EQ(all_docs({write(d.file("a.jsonl"), lines)}, jsonl()), want);
  EXPECT_EQ(all_docs({write(d.file("a.jsonl.zst"), zstd(lines))}, jsonl()), want);
  EXPECT_EQ(all_docs({write(d.file("a.jsonl.gz"), gzip(lines))}, jsonl()), want);
  // auto: by the name, less the compression suffix.
  text::DocumentOptions a;
  a.format = text::Format::kAuto;
  EXPECT_EQ(all_docs({d.file("a.jsonl.zst")}, a), want);
  EXPECT_TRUE(text::looks_like_jsonl("x/train-00001.jsonl.zst"));
  EXPECT_TRUE(text::looks_like_jsonl("x.ndjson.gz"));
  EXPECT_FALSE(text::looks_like_jsonl("x.txt.zst"));
  EXPECT_FALSE(text::looks_like_jsonl("jsonl"));
  // Another field.
  EXPECT_EQ(
      all_docs({write(d.file("b.jsonl"), "{\"body\": \"x\"}\n{\"body\": \"y\"}\n")}, jsonl("body")),
      (std::vector<std::string>{"x", "y"}));
}

TEST(Documents, BadInputsNameTheFileAndLine) {
  TempDir d;
  auto has = [](const std::string& msg, const std::string& needle) {
    return msg.find(needle) != std::string::npos;
  };
  const std::string good = "{\"text\": \"ok\"}\n";
  std::string m =
      error_of({write(d.file("bad.jsonl"), good + good + "{\"text\": \"cut\n")}, jsonl());
  EXPECT_TRUE(has(m, "bad.jsonl:3: malformed JSON line")) << m;
  m = error_of({write(d.file("field.jsonl"), good + "{\"body\": \"x\"}\n")}, jsonl());
  EXPECT_TRUE(has(m, "field.jsonl:2: no \"text\" field")) << m;
  m = error_of({write(d.file("num.jsonl"), "{\"text\": 3}\n")}, jsonl());
  EXPECT_TRUE(has(m, "num.jsonl:1: the \"text\" field is not a string")) << m;
  m = error_of({write(d.file("arr.jsonl"), "[1, 2]\n")}, jsonl());
  EXPECT_TRUE(has(m, "arr.jsonl:1: the line is not a JSON object")) << m;
  // Truncated compressed streams: every cut point past the header is caught.
  const std::string text = many_lines(3000);
  const std::string gz = gzip(text), zs = zstd(text);
  for (double frac : {0.3, 0.9, 0.999}) {
    m = error_of({write(d.file("t.gz"), gz.substr(0, static_cast<size_t>(gz.size() * frac)))});
    EXPECT_TRUE(has(m, "t.gz: truncated gzip stream")) << frac << " " << m;
    m = error_of({write(d.file("t.zst"), zs.substr(0, static_cast<size_t>(zs.size() * frac)))});
    EXPECT_TRUE(has(m, "t.zst: truncated zstd stream")) << frac << " " << m;
  }
  std::string corrupt = gz;
  corrupt[corrupt.size() / 2] ^= 0x5a;
  corrupt[corrupt.size() / 2 + 1] ^= 0x5a;
  m = error_of({write(d.file("c.gz"), corrupt)});
  EXPECT_TRUE(has(m, "c.gz: ")) << m;
  // Invalid UTF-8, inside a compressed file: the line is named.
  m = error_of({write(d.file("u.txt.zst"), zstd("fine\nbad \xff byte\n"))});
  EXPECT_TRUE(has(m, "u.txt.zst:2: invalid UTF-8")) << m;
  // An empty shard among good ones, and a shard of blank lines.
  fs::make_dirs(d.file("shards"));
  write(d.file("shards/a.txt"), "x\n");
  write(d.file("shards/b.txt"), "");
  write(d.file("shards/c.txt"), "y\n");
  m = error_of(text::expand_shards(d.file("shards"), "data.train"));
  EXPECT_TRUE(has(m, "shards/b.txt: the shard holds no document")) << m;
  write(d.file("shards/b.txt"), "\n\n");
  m = error_of(text::expand_shards(d.file("shards"), "data.train"));
  EXPECT_TRUE(has(m, "shards/b.txt: the shard holds no document")) << m;
  // Paths that name nothing.
  fs::make_dirs(d.file("empty"));
  try {
    text::expand_shards(d.file("empty"), "data.train");
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_TRUE(has(e.what(), "the directory holds no file (data.train)")) << e.what();
  }
  try {
    text::expand_shards(d.file("shards/*.jsonl"), "data.valid");
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_TRUE(has(e.what(), "the pattern matches no file (data.valid)")) << e.what();
  }
}

TEST(Documents, ShardsReadInNameOrder) {
  TempDir d;
  fs::make_dirs(d.file("s"));
  write(d.file("s/part-10.txt"), "c\n");
  write(d.file("s/part-02.txt.gz"), gzip("b\n"));
  write(d.file("s/part-01.txt.zst"), zstd("a\n"));
  write(d.file("s/.hidden"), "never\n");
  const std::vector<std::string> abc = {"a", "b", "c"};
  EXPECT_EQ(all_docs(text::expand_shards(d.file("s"), "data.train")), abc);
  EXPECT_EQ(all_docs(text::expand_shards(d.file("s/part-*"), "data.train")), abc);
  EXPECT_EQ(text::expand_shards(d.file("s/part-1*"), "data.train").size(), 1u);
}

data::TokenDataset header(int64_t vocab) {
  auto ds = data::empty_dataset(data::DataKind::kLm);
  ds.split = "train";
  ds.tokenizer = "test-tok";
  ds.tokenizer_kind = "byte";
  ds.vocab_size = vocab;
  ds.source_hash = "h";
  return ds;
}

std::vector<std::vector<int32_t>> some_docs(int n, int64_t vocab, int salt) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> d;
    for (int t = 0; t < 1 + (i * 7 + salt) % 23; ++t)
      d.push_back(static_cast<int32_t>((i * 131 + t * 17 + salt) % vocab));
    out.push_back(d);
  }
  return out;
}

// The split a TokenWriter writes equals the one write_tokens writes, uint16 or int32, and a
// writer killed between batches (more bytes on disk than its state records) resumes exactly.
TEST(TokenWriter, StreamsResumesAndMatchesTheWholeWrite) {
  for (int64_t vocab : {300, 70000}) {
    TempDir d;
    const auto a = some_docs(500, vocab, 1), b = some_docs(300, vocab, 2);
    auto whole = header(vocab);
    for (const auto* part : {&a, &b})
      for (const auto& x : *part) whole.lm().text.push(x);
    data::write_tokens(d.file("whole.h5"), whole);
    const std::string out = d.file("train.h5");
    {
      data::TokenWriter w(out, header(vocab));
      w.append(a);
    }  // killed after the first batch
    const std::string part = d.file(".train.h5.part");
    ASSERT_TRUE(fs::exists(part + "/state.json"));
    EXPECT_FALSE(fs::exists(out));  // never looks complete
    {  // a batch half-written when the kill came: bytes past the recorded state
      std::FILE* f = std::fopen((part + "/tokens.bin").c_str(), "ab");
      std::fputs("garbage", f);
      std::fclose(f);
    }
    {
      data::TokenWriter w(out, header(vocab));
      EXPECT_EQ(w.documents(), 500);
      w.append(b);
      w.finish();
    }
    EXPECT_FALSE(fs::exists(part));
    auto back = data::read_tokens(out, data::DataKind::kLm);
    auto ref = data::read_tokens(d.file("whole.h5"), data::DataKind::kLm);
    ASSERT_TRUE(back.lm().text.on_disk());
    EXPECT_EQ(back.lm().text.to_ragged().tokens, whole.lm().text.to_ragged().tokens);
    EXPECT_EQ(back.lm().text.to_ragged().offsets, whole.lm().text.to_ragged().offsets);
    EXPECT_EQ(ref.lm().text.to_ragged().tokens, whole.lm().text.to_ragged().tokens);
    auto f = h5::open_file(out, false);
    h5::Handle g(H5Gopen2(f.id(), "text", H5P_DEFAULT), H5Gclose);
    EXPECT_EQ(h5::raw_layout(g.id(), "tokens", out).size, vocab <= 65536 ? 2 : 4);
    // A writer for other input (another source hash) starts over.
    {
      data::TokenWriter w(out + "2", header(vocab));
      w.append(a);
    }
    auto other = header(vocab);
    other.source_hash = "changed";
    data::TokenWriter w2(out + "2", other);
    EXPECT_EQ(w2.documents(), 0);
  }
}

// A split of format version 1 (int32 ids in chunked datasets, as earlier versions wrote) is
// still read, whole; prepare rewrites it as version 2.
TEST(TokenWriter, FormatOneIsReadWhole) {
  TempDir d;
  const std::string path = d.file("v1.h5");
  {
    auto f = h5::create_file(path);
    h5::set_attr(f.id(), "format", std::string("ropelab.tokens"));
    h5::set_attr(f.id(), "format_version", int64_t{1});
    h5::set_attr(f.id(), "kind", std::string("lm"));
    h5::set_attr(f.id(), "split", std::string("train"));
    h5::set_attr(f.id(), "tokenizer", std::string("t"));
    h5::set_attr(f.id(), "tokenizer_kind", std::string("byte"));
    h5::set_attr(f.id(), "vocab_size", int64_t{100});
    h5::set_attr(f.id(), "source_hash", std::string("h"));
    auto g = h5::create_group(f.id(), "text", path);
    h5::write_i32(g.id(), "tokens", {7, 8, 9, 10, 11});
    h5::write_i64(g.id(), "offsets", {0, 2, 5});
  }
  auto ds = data::read_tokens(path, data::DataKind::kLm);
  EXPECT_FALSE(ds.lm().text.on_disk());
  EXPECT_EQ(ds.lm().text.sequence(1), (std::vector<int32_t>{9, 10, 11}));
  EXPECT_EQ(data::read_token_attrs(path).at("format_version"), "1");
}

// A split read in place gives the very batches of the same split held in memory: clm and mlm,
// joined and by documents, shuffled and in order.
TEST(TokenWriter, MappedSplitGivesTheSameBatches) {
  TempDir d;
  auto mem = header(200);
  for (const auto& x : some_docs(400, 200, 3)) mem.lm().text.push(x);
  // Ids below the specials are fine for the streams; MLM masks only ids >= Special::kCount.
  data::write_tokens(d.file("t.h5"), mem);
  auto disk = data::read_tokens(d.file("t.h5"));
  ASSERT_TRUE(disk.lm().text.on_disk());
  for (bool docs : {false, true})
    for (bool shuffle : {true, false}) {
      data::StreamOptions o;
      o.seq_len = 33;
      o.batch_size = 3;
      o.seed = 5;
      o.documents = docs;
      o.shuffle = shuffle;
      for (auto make : {data::make_lm_stream, data::make_mlm_stream}) {
        auto a = make(mem, o), b = make(disk, o);
        ASSERT_EQ(a->batches_per_epoch(), b->batches_per_epoch());
        for (int64_t i = 0; i < a->batches_per_epoch(); ++i) {
          auto x = a->batch(1, i), y = b->batch(1, i);
          ASSERT_TRUE(torch::equal(x.input_BT, y.input_BT));
          ASSERT_TRUE(torch::equal(x.target_BT, y.target_BT));
          ASSERT_EQ(x.doc_BT.defined(), docs);
          if (docs) {
            ASSERT_TRUE(torch::equal(x.doc_BT, y.doc_BT));
          }
        }
      }
    }
}

// prepare: a JSONL.zst corpus in shards gives the tokens of the same documents as plain text.
TEST(Prepare, JsonlShardsMatchPlainText) {
  TempDir d;
  std::string text, shard1, shard2;
  for (int i = 0; i < 300; ++i) {
    const std::string doc = "doc " + std::to_string(i) + " is about " + std::to_string(i * 7);
    text += doc + "\n";
    (i < 120 ? shard1 : shard2) +=
        "{\"text\": \"" + doc + "\", \"n\": " + std::to_string(i) + "}\n";
  }
  fs::make_dirs(d.file("web"));
  write(d.file("web/train-000.jsonl.zst"), zstd(shard1));
  write(d.file("web/train-001.jsonl.gz"), gzip(shard2));
  write(d.file("plain.txt"), text);
  auto prep = [&](const std::string& train) {
    config::DataConfig c;
    c.source = config::DataSource::kText;
    c.train = train;
    c.prepared_dir = d.file("prep");
    c.tokenizer.type = config::TokenizerType::kByte;
    auto p = data::prepare(data::plan(c, 64), 2);
    return data::read_tokens(p.splits.at("train")).lm().text.to_ragged();
  };
  auto plain = prep(d.file("plain.txt"));
  EXPECT_EQ(plain.size(), 300);
  auto shards = prep(d.file("web"));
  EXPECT_EQ(shards.tokens, plain.tokens);
  EXPECT_EQ(shards.offsets, plain.offsets);
  auto glob = prep(d.file("web/train-*"));
  EXPECT_EQ(glob.tokens, plain.tokens);
}

// SentencePiece skips lines over 4192 bytes: documents that long (a web page on one JSON line)
// are cut into pieces for its sample, so it learns from them rather than from nothing.
TEST(Prepare, LongDocumentsTrainTheTokenizer) {
  TempDir d;
  const char* words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};
  std::string lines;
  for (int i = 0; i < 30; ++i) {
    std::string doc;
    for (int w = 0; w < 900; ++w) doc += std::string(words[(i * 31 + w * 7) % 8]) + " ";
    ASSERT_GT(doc.size(), 4192u);
    lines += "{\"text\": \"" + doc + "\"}\n";
  }
  config::DataConfig c;
  c.source = config::DataSource::kText;
  c.train = write(d.file("long.jsonl"), lines);
  c.prepared_dir = d.file("prep");
  c.tokenizer.vocab_size = 60;
  auto p = data::prepare(data::plan(c, 64), 1);
  auto ds = data::read_tokens(p.splits.at("train"));
  EXPECT_EQ(ds.lm().text.size(), 30);
  // Whole words became pieces: far fewer tokens than bytes.
  EXPECT_LT(ds.lm().text.num_tokens(), 30 * 900 * 3);
}

}  // namespace
}  // namespace ropelab
