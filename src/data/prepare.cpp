#include "data/prepare.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "corpora/builtin.h"
#include "corpora/glue.h"
#include "data/synthetic.h"
#include "data/token_writer.h"
#include "data/tokens.h"
#include "text/documents.h"
#include "text/lines.h"
#include "tokenizers/bpe.h"
#include "tokenizers/vocab_order.h"
#include "tokenizers/wordpiece.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/progress.h"
#include "util/signals.h"

namespace ropelab::data {

namespace stdfs = std::filesystem;

namespace {

const char* kSplits[] = {"train", "valid", "test"};

std::string join_path(const std::string& a, const std::string& b) {
  return (stdfs::path(a) / b).string();
}

using text::read_lines;

// Where the text of each split lives (built-in corpora: once exported to text_dir).
std::vector<SplitSource> split_sources(const config::DataConfig& d, const Plan& p) {
  std::vector<SplitSource> out;
  const bool builtin = p.builtin;
  if (p.kind == config::DataKind::kLm) {
    if (builtin) {
      for (const char* s : kSplits)
        out.push_back({s, {join_path(p.text_dir, std::string(s) + ".txt")}});
    } else {
      std::map<std::string, std::string> files = {
          {"train", d.train}, {"valid", d.valid}, {"test", d.test}};
      for (const char* s : kSplits)
        if (!files[s].empty()) out.push_back({s, {files[s]}});
    }
  } else if (p.kind == config::DataKind::kParallel) {
    std::string ss = builtin ? "en" : d.source_suffix, ts = builtin ? "es" : d.target_suffix;
    std::map<std::string, std::string> base;
    if (builtin)
      for (const char* s : kSplits) base[s] = join_path(p.text_dir, s);
    else
      base = {{"train", d.train}, {"valid", d.valid}, {"test", d.test}};
    for (const char* s : kSplits)
      if (!base[s].empty()) out.push_back({s, {base[s] + "." + ss, base[s] + "." + ts}});
  } else if (p.kind == config::DataKind::kGlue) {
    const auto& task = p.glue;
    const bool mnli = task.name == "MNLI";
    std::string dir = builtin ? join_path(p.text_dir, task.name) : d.train;
    // MNLI validates on dev_matched ("valid"); dev_mismatched is "valid_mismatched".
    std::vector<std::pair<std::string, std::string>> files = {{"train", "train"}, {"valid", "dev"}};
    if (mnli)
      files = {
          {"train", "train"}, {"valid", "dev_matched"}, {"valid_mismatched", "dev_mismatched"}};
    for (const auto& [split, name] : files)
      out.push_back({split, {join_path(dir, corpora::glue_file_name(task, name))}});
    // Test files are optional (GLUE's are unlabeled): MNLI has a matched ("test") and a
    // mismatched ("test_mismatched") one.
    if (mnli && !builtin) {
      out.push_back({"test", {join_path(dir, "test_matched.tsv")}, true});
      out.push_back({"test_mismatched", {join_path(dir, "test_mismatched.tsv")}, true});
    } else {
      out.push_back({"test", {join_path(dir, builtin ? "test_labeled.tsv" : "test.tsv")}, true});
    }
  }
  return out;
}

std::string tokenizer_tag(const config::DataConfig& d) {
  const auto& t = d.tokenizer;
  if (t.type == config::TokenizerType::kByte) return "byte";
  if (t.type == config::TokenizerType::kSynthetic) {
    // The generator's settings name the data: other settings are other data.
    const auto& g = d.synthetic;
    return "synthetic-" +
           fs::hex64(fs::hash_bytes(fmt::format("v1|{}|{}|{}|{}|{}|{}", g.size, g.min_size,
                                                g.train_examples, g.valid_examples, g.test_examples,
                                                g.seed)))
               .substr(0, 8);
  }
  // An imported checkpoint's tokenizer: its files (every checkpoint names them alike) and
  // options name the data.
  auto files_hash = [&](const std::string& options) {
    return fs::hex64(
               fs::hash_bytes(stdfs::absolute(t.model).string() + "|" +
                              (t.vocab_order.empty() ? std::string()
                                                     : stdfs::absolute(t.vocab_order).string()) +
                              "|" + options))
        .substr(0, 8);
  };
  if (t.type == config::TokenizerType::kWordPiece)
    return "wordpiece-" +
           files_hash(std::string(t.lowercase ? "l" : "") + config::to_string(t.strip_accents));
  if (t.type == config::TokenizerType::kBpe) return "bpe-" + files_hash("");
  if (!t.model.empty())
    return "spm-" + stdfs::path(t.model).stem().string() +
           (t.vocab_order.empty() ? "" : "-" + files_hash("")) +
           (t.joint ? "" : "+" + stdfs::path(t.target_model).stem().string());
  return "spm" + std::to_string(t.vocab_size) + "-" + config::to_string(t.model_type) +
         (t.joint ? "" : "-separate");
}

// The side of parallel text a tokenizer learns from: both (joint), or one.
enum class Side { kBoth, kSource, kTarget };

std::string out_dir(const config::DataConfig& d, const Plan& p) {
  std::string src = config::to_string(d.source);
  if (!p.builtin && p.kind != config::DataKind::kSynthetic) {
    // User data: name the folder after the training file, plus a hash of its path.
    // A described TSV layout is part of the name: another layout of the same files is other data.
    std::string layout;
    if (!d.tsv.a.empty()) {
      const auto& t = d.tsv;
      layout = t.name + "|" + t.a + "|" + t.b + "|" + t.c + "|" + t.label + "|" +
               (t.regression ? "r" : "");
      for (const auto& l : t.labels) layout += "|" + l;
    }
    std::string name = stdfs::path(d.train).filename().string();
    if (name.empty()) name = stdfs::path(d.train).parent_path().filename().string();  // "dir/"
    for (char& c : name)  // a glob's '*' and the like make no folder name
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
    src = src + "-" + name + "-" +
          fs::hex64(fs::hash_bytes(stdfs::absolute(d.train).string() + layout)).substr(0, 8);
  }
  return join_path(join_path(d.prepared_dir, src), tokenizer_tag(d));
}

// The inputs of one stage of prepare that exist: every required file (UserError naming the
// split's config key otherwise), and the optional ones present.
std::vector<SplitSource> present_inputs(const Plan& p) {
  std::vector<SplitSource> out;
  if (p.kind == config::DataKind::kLm) {  // a file, a directory of shards or a glob
    for (const auto& si : p.inputs)
      out.push_back({si.split, text::expand_shards(si.files[0], "data." + si.split)});
    return out;
  }
  for (const auto& si : p.inputs) {
    bool all = true;
    for (const auto& f : si.files) {
      if (fs::exists(f)) continue;
      if (!si.optional) throw UserError(f + ": no such file (data." + si.split + ")");
      all = false;
    }
    if (all) out.push_back(si);
  }
  return out;
}

// Lines of all training text (for tokenizer training); for parallel data, of `side`.
text::DocumentOptions document_options(const Plan& p) {
  text::DocumentOptions o;
  o.format = p.format == config::TextFormat::kJsonl  ? text::Format::kJsonl
             : p.format == config::TextFormat::kText ? text::Format::kText
                                                     : text::Format::kAuto;
  o.field = p.text_field;
  o.separator = p.document_separator;
  o.whole_file = p.whole_file;
  return o;
}

// Whether any of `files` is read as JSON lines.
bool reads_jsonl(const Plan& p, const std::vector<std::string>& files) {
  if (p.format != config::TextFormat::kAuto) return p.format == config::TextFormat::kJsonl;
  return std::any_of(files.begin(), files.end(), text::looks_like_jsonl);
}

// Appends `text` to a SentencePiece sample, a line at a time. SentencePiece skips lines over
// 4192 bytes, so `cut` cuts a longer line into pieces at spaces (or, in a run without one, at a
// character boundary): a web document or a long line of user text is learned from, not dropped.
using Emit = std::function<void(const std::string&)>;
// A tokenizer's training text, given piece by piece to `emit` (an lm corpus's sample is never
// held whole: it is hashed in one pass and, when the tokenizer must be trained, written out in
// another).
using TextSource = std::function<void(const Emit&)>;

size_t add_to_sample(const Emit& emit, const std::string& text, bool cut) {
  constexpr size_t kMax = 4000;
  size_t at = 0;
  do {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    size_t b = at;
    while (cut && nl - b > kMax) {
      size_t e = text.rfind(' ', b + kMax);
      if (e == std::string::npos || e <= b) {
        e = b + kMax;
        while (e > b && (static_cast<unsigned char>(text[e]) & 0xC0) == 0x80) --e;  // UTF-8
        if (e == b) e = b + kMax;
      }
      emit(text.substr(b, e - b) + "\n");
      b = text[e] == ' ' ? e + 1 : e;
    }
    emit(text.substr(b, nl - b) + "\n");
    at = nl + 1;
  } while (at < text.size());
  return text.size() + 1;
}

// The first data.tokenizer.sample_mb of an lm corpus's training text: its lines, or the
// documents of JSON lines. The built-in corpora's lines are kept whole, as their tokenizers
// have always been trained.
void lm_tokenizer_sample(const SplitSource& train, const Plan& p, const Emit& emit) {
  const auto limit = static_cast<size_t>(p.tokenizer.sample_mb * 1e6);
  const bool cut = !p.builtin;
  size_t n = 0;
  if (reads_jsonl(p, train.files)) {
    text::DocumentReader docs(train.files, document_options(p));
    for (text::Document d; n < limit && docs.next(&d);) n += add_to_sample(emit, d.text, cut);
    return;
  }
  for (const auto& f : train.files) {
    text::LineReader lines(f);
    for (std::string l; n < limit && lines.next(&l);) n += add_to_sample(emit, l, cut);
  }
}

TextSource tokenizer_training_text(const std::vector<SplitSource>& inputs, const Plan& p,
                                   Side side) {
  if (!p.tokenizer_text.empty())
    return [path = p.tokenizer_text](const Emit& emit) { emit(fs::read_file(path)); };
  if (p.kind == config::DataKind::kLm) {
    for (const auto& si : inputs)
      if (si.split == "train")
        return [si, &p](const Emit& emit) { lm_tokenizer_sample(si, p, emit); };
    return [](const Emit&) {};
  }
  std::string all;
  for (const auto& si : inputs) {
    if (si.split != "train") continue;
    if (p.kind == config::DataKind::kGlue) {
      auto gf = corpora::read_glue_tsv(si.files[0], p.glue);
      for (const auto& e : gf.examples)
        for (const auto* t : {&e.a, &e.b, &e.c})
          if (!t->empty()) all += *t + "\n";
    } else {
      for (size_t i = 0; i < si.files.size(); ++i) {
        if ((side == Side::kSource && i != 0) || (side == Side::kTarget && i != 1)) continue;
        for (const auto& l : read_lines(si.files[i])) all += l + "\n";
      }
    }
  }
  return [all = std::move(all)](const Emit& emit) { emit(all); };
}

// Prepare stops between steps; every file it wrote before is complete (atomic writes).
void throw_if_stopped() {
  signals::throw_if_stopped("prepare",
                            "the files it finished are complete and kept, and the "
                            "next prepare reuses them and resumes the split it was writing");
}

// Runs fn(i) for every i in [0, n) on `threads` threads (at most 8), while the calling thread
// calls poll(started) every 50 ms: progress, and on a stop request no more work is handed out.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn,
                  const std::function<void(int64_t)>& poll) {
  threads = std::max(1, std::min<int>(threads, 8));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  std::atomic<int64_t> next{0};
  std::exception_ptr err;
  std::mutex mu;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      try {
        for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!err) err = std::current_exception();
        next.store(n);
      }
    });
  }
  while (true) {
    const int64_t k = std::min<int64_t>(next.load(), n);
    if (poll) poll(k);
    if (k >= n) break;
    if (signals::stop_requested()) next.store(n);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& th : pool) th.join();
  if (err) std::rethrow_exception(err);
}

// Encodes lines on `threads` threads (SentencePiece's Encode is const and thread-safe).
std::vector<std::vector<int32_t>> encode_all(const tokenizers::Tokenizer& tok,
                                             const std::vector<std::string>& lines, int threads,
                                             Progress* bar, int64_t* done) {
  std::vector<std::vector<int32_t>> out(lines.size());
  parallel_for(
      static_cast<int64_t>(lines.size()), threads,
      [&](int64_t i) { out[static_cast<size_t>(i)] = tok.encode(lines[static_cast<size_t>(i)]); },
      [&](int64_t k) { bar->update(*done + k); });
  throw_if_stopped();
  *done += static_cast<int64_t>(lines.size());
  return out;
}

// The next batch of documents: about 8 MB of text (or 1 document at the end of the input).
std::vector<std::string> read_batch(text::DocumentReader& reader) {
  constexpr size_t kBatchBytes = 8u << 20;
  std::vector<std::string> batch;
  size_t bytes = 0;
  for (text::Document d; bytes < kBatchBytes && reader.next(&d);) {
    bytes += d.text.size();
    batch.push_back(std::move(d.text));
  }
  return batch;
}

// An lm split, streamed: batches are read (the next while this one encodes), encoded on
// `threads` threads and appended to the split's TokenWriter, which a stopped or killed prepare
// resumes from.
void prepare_lm_split(const Plan& plan, const SplitSource& si, const tokenizers::Tokenizer& tok,
                      const TokenDataset& header, const std::string& out, int threads) {
  TokenWriter w(out, header);
  text::DocumentReader reader(si.files, document_options(plan));
  if (w.documents() > 0) {
    spdlog::info("{}: resuming after {} documents ({} tokens)", out, w.documents(), w.tokens());
    text::Document d;
    for (int64_t i = 0; i < w.documents(); ++i)
      if (!reader.next(&d))
        throw UserError(si.files.back() + ": holds fewer documents than the partial " + out +
                        " records");
  }
  const int64_t mb = 1000000;
  Progress bar("encode " + si.split, (reader.total_bytes() + mb - 1) / mb, "MB",
               reader.consumed() / mb);
  const int64_t start_tokens = w.tokens();
  const auto t0 = std::chrono::steady_clock::now();
  double text_bytes = 0;  // of the documents this process encoded (decompressed)
  auto fields = [&] {
    const double s = std::max(
        1e-3, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return fmt::format("{} docs, {:.1f}M tokens | text {:.1f} MB/s, {:.0f}k tok/s", w.documents(),
                       static_cast<double>(w.tokens()) / 1e6, text_bytes / s / 1e6,
                       static_cast<double>(w.tokens() - start_tokens) / s / 1e3);
  };
  std::vector<std::string> batch = read_batch(reader);
  while (!batch.empty()) {
    std::vector<std::vector<int32_t>> ids(batch.size());
    auto encoded = std::async(std::launch::async, [&] {
      parallel_for(
          static_cast<int64_t>(batch.size()), threads,
          [&](int64_t i) {
            ids[static_cast<size_t>(i)] = tok.encode(batch[static_cast<size_t>(i)]);
          },
          nullptr);
    });
    const int64_t read_before = reader.consumed();
    std::vector<std::string> next = read_batch(reader);  // overlaps the encoding
    encoded.get();
    throw_if_stopped();  // a partial batch is not appended: the next prepare redoes it
    w.append(ids);
    for (const auto& doc : batch) text_bytes += static_cast<double>(doc.size());
    bar.update(read_before / mb, fields());
    batch = std::move(next);
  }
  if (w.documents() == 0) throw UserError(si.files[0] + ": no text (the file is empty)");
  bar.update((reader.total_bytes() + mb - 1) / mb, fields());
  bar.finish(fields());
  w.finish();
  spdlog::info("wrote {}: {} documents, {} tokens", out, w.documents(), w.tokens());
}

// Trains `<dir>/<name>.model` on the text of `source` unless the stamp beside it says it is up
// to date. The text is hashed as it streams by, and written out only when it is to be learned.
void train_tokenizer(const config::TokenizerConfig& t, const std::string& dir,
                     const std::string& name, const TextSource& source, int threads,
                     const std::string& empty_name) {
  std::string model = join_path(dir, name + ".model"), stamp_path = join_path(dir, name + ".stamp");
  fs::StreamHash hash;
  size_t bytes = 0;
  source([&](const std::string& piece) {
    hash.update(piece);
    bytes += piece.size();
  });
  if (bytes == 0) throw UserError(empty_name + ": the training text is empty");
  std::string stamp = "input " + fs::hex64(hash.digest()) + " vocab " +
                      std::to_string(t.vocab_size) + " type " + config::to_string(t.model_type) +
                      " coverage " + std::to_string(t.character_coverage) + "\n";
  if (fs::exists(model) && fs::exists(stamp_path) && fs::read_file(stamp_path) == stamp) {
    spdlog::info("tokenizer up to date: {}", model);
    return;
  }
  std::string input = join_path(dir, "." + name + "-input.txt");
  fs::commit_atomic(input, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary);
    source([&](const std::string& piece) {
      out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
    });
    out.flush();
    if (!out) throw UserError(input + ": write failed");
  });
  spdlog::info("training SentencePiece {} tokenizer {} (vocab {}) on {:.1f} MB of text",
               config::to_string(t.model_type), name, t.vocab_size,
               static_cast<double>(bytes) / 1e6);
  tokenizers::SpmTrainOptions opt;
  opt.vocab_size = t.vocab_size;
  opt.model_type = config::to_string(t.model_type);
  opt.character_coverage = t.character_coverage;
  opt.threads = threads;
  tokenizers::train_spm(input, join_path(dir, name), opt);
  std::remove(input.c_str());
  fs::write_file_atomic(stamp_path, stamp);
}

// Where the tokenizer model(s) of `d` live: {source or joint, target or ""}.
std::pair<std::string, std::string> tokenizer_paths(const config::DataConfig& d,
                                                    const std::string& dir) {
  const auto& t = d.tokenizer;
  if (t.type == config::TokenizerType::kWordPiece || t.type == config::TokenizerType::kBpe)
    return {t.model, ""};
  if (t.type != config::TokenizerType::kSpm) return {"", ""};
  if (!t.model.empty()) return {t.model, t.target_model};
  if (t.joint) return {join_path(dir, "tokenizer.model"), ""};
  return {join_path(dir, "tokenizer.model"), join_path(dir, "tokenizer-target.model")};
}

}  // namespace

namespace {
// The generator's bounds on data.synthetic, and the model's context (task.seq_len) against its
// longest example.
void check_synthetic(const config::DataConfig& d, int64_t max_len) {
  const auto src = d.source;
  const auto& g = d.synthetic;
  const std::string name = config::to_string(src);
  const int64_t lo = synthetic::min_size(src), hi = synthetic::max_size(src);
  if (g.size < lo || g.size > hi)
    throw UserError("data.synthetic.size: " + name + " needs a size in [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + "]");
  if (g.min_size != 0 && (g.min_size < lo || g.min_size > g.size))
    throw UserError("data.synthetic.min_size: min_size must be in [" + std::to_string(lo) +
                    ", data.synthetic.size] (0 = " + std::to_string(lo) + ")");
  const int64_t longest = synthetic::max_tokens(src, g.size);
  if (max_len < longest)
    throw UserError("task.seq_len: seq_len (" + std::to_string(max_len) +
                    ") is shorter than the longest " + name + " example of size " +
                    std::to_string(g.size) + " (" + std::to_string(longest) + " tokens)");
}
}  // namespace

std::vector<std::string> read_documents(const std::string& path, const std::string& separator) {
  text::DocumentOptions o;
  o.separator = separator;
  text::DocumentReader reader({path}, o);
  std::vector<std::string> docs;
  for (text::Document d; reader.next(&d);) docs.push_back(std::move(d.text));
  return docs;
}

Plan plan(const config::DataConfig& d, int64_t max_len) {
  Plan p;
  p.source = d.source;
  p.kind = config::kind_of(d.source);
  p.builtin = config::is_builtin(d.source);
  p.whole_file = d.source == config::DataSource::kBytes;
  p.document_separator = d.document_separator;
  p.format = d.format;
  p.text_field = d.text_field;
  if (p.kind == config::DataKind::kSynthetic) check_synthetic(d, max_len);
  if (p.builtin)
    p.text_dir = join_path(join_path(d.prepared_dir, "text"), config::to_string(d.source));
  if (d.source == config::DataSource::kBibleEnBooks)  // bible-en's text: its tokenizer
    p.tokenizer_text = join_path(p.text_dir, corpora::kChapterText);
  if (p.kind == config::DataKind::kGlue) p.glue = corpora::glue_task_of(d);
  p.inputs = split_sources(d, p);
  p.tokenizer = d.tokenizer;
  p.synthetic = d.synthetic;
  p.out_dir = out_dir(d, p);
  std::tie(p.tokenizer_path, p.target_tokenizer_path) = tokenizer_paths(d, p.out_dir);
  p.splits = {"train", "valid", "test"};
  if (p.kind == config::DataKind::kGlue && p.glue.name == "MNLI")
    p.splits = {"train", "valid", "valid_mismatched", "test", "test_mismatched"};
  return p;
}

Prepared prepared_paths(const Plan& plan) {
  Prepared p;
  p.plan = plan;
  for (const auto& n : plan.splits) {
    std::string f = join_path(plan.out_dir, n + ".h5");
    if (fs::exists(f)) p.splits[n] = f;
  }
  if (p.splits.count("train") == 0)
    throw UserError(plan.out_dir +
                    ": no prepared training data; HINT: run `ropelab prepare` with this config");
  return p;
}

TokenDataset load_split(const Prepared& p, const std::string& split,
                        const std::string& fingerprint) {
  auto it = p.splits.find(split);
  if (it == p.splits.end())
    throw UserError("no prepared '" + split + "' split; HINT: run `ropelab prepare`");
  TokenDataset ds = read_tokens(it->second, p.plan.kind);
  if (ds.tokenizer != fingerprint)
    throw UserError(it->second + ": was made with tokenizer " + ds.tokenizer +
                    ", but the tokenizer in use is " + fingerprint +
                    "; HINT: run `ropelab prepare` again");
  return ds;
}

tokenizers::WordPieceOptions wordpiece_options(const config::TokenizerConfig& t) {
  tokenizers::WordPieceOptions o;
  o.lowercase = t.lowercase;
  o.strip_accents = t.strip_accents == config::StripAccents::kAuto
                        ? t.lowercase
                        : t.strip_accents == config::StripAccents::kYes;
  return o;
}

std::unique_ptr<tokenizers::Tokenizer> load_tokenizer(const Plan& p) {
  if (p.tokenizer.type == config::TokenizerType::kByte)
    return std::make_unique<tokenizers::ByteTokenizer>();
  if (p.tokenizer.type == config::TokenizerType::kSynthetic)
    return std::make_unique<synthetic::SyntheticTokenizer>();
  if (p.tokenizer.type == config::TokenizerType::kWordPiece)
    return std::make_unique<tokenizers::WordPieceTokenizer>(p.tokenizer_path,
                                                            wordpiece_options(p.tokenizer));
  const auto& t = p.tokenizer;
  auto order =
      t.vocab_order.empty() ? std::vector<int64_t>{} : tokenizers::read_vocab_order(t.vocab_order);
  if (t.type == config::TokenizerType::kBpe)
    return std::make_unique<tokenizers::BpeTokenizer>(p.tokenizer_path, std::move(order));
  return std::make_unique<tokenizers::SpmTokenizer>(p.tokenizer_path, std::move(order));
}

std::unique_ptr<tokenizers::Tokenizer> load_target_tokenizer(const Plan& p) {
  if (p.target_tokenizer_path.empty()) return nullptr;
  return std::make_unique<tokenizers::SpmTokenizer>(p.target_tokenizer_path);
}

std::string fingerprint(const tokenizers::Tokenizer& tok, const tokenizers::Tokenizer* target) {
  return target ? tok.fingerprint() + "|" + target->fingerprint() : tok.fingerprint();
}

namespace {
// Synthetic sources: each split generated from data.synthetic (no text, no tokenizer training).
Prepared prepare_synthetic(const Plan& plan) {
  Prepared p;
  p.plan = plan;
  const auto& g = plan.synthetic;
  const int64_t lo = g.min_size > 0 ? g.min_size : synthetic::min_size(plan.source);
  const std::string& dir = plan.out_dir;
  fs::make_dirs(dir);
  const std::pair<const char*, int64_t> splits[] = {
      {"train", g.train_examples}, {"valid", g.valid_examples}, {"test", g.test_examples}};
  const synthetic::Split ids[] = {synthetic::Split::kTrain, synthetic::Split::kValid,
                                  synthetic::Split::kTest};
  for (int i = 0; i < 3; ++i) {
    std::string out = join_path(dir, std::string(splits[i].first) + ".h5");
    const std::string hash = "synthetic-v1";
    auto attrs = read_token_attrs(out);
    if (!attrs.empty() && attrs["source_hash"] == hash &&
        attrs["format_version"] == std::to_string(kTokensFormatVersion)) {
      p.splits[splits[i].first] = out;
      continue;
    }
    auto examples = synthetic::make_examples(plan.source, ids[i], splits[i].second, lo, g.size,
                                             static_cast<uint64_t>(g.seed));
    TokenDataset ds = synthetic::to_dataset(examples, splits[i].first);
    ds.source_hash = hash;
    throw_if_stopped();
    write_tokens(out, ds);
    spdlog::info("wrote {}: {} {} examples of size {}..{}", out, examples.size(),
                 config::to_string(plan.source), lo, g.size);
    p.splits[splits[i].first] = out;
  }
  return p;
}
}  // namespace

Prepared prepare(const Plan& plan, int threads) {
  // Two prepares of the same data (two runs started together, two ablations) build it once:
  // the second waits for the first, then finds every stage up to date.
  fs::make_dirs(plan.out_dir);
  auto lock = fs::DirLock::acquire(plan.out_dir, "prepare", fs::DirLock::Wait::kYes);
  if (plan.kind == config::DataKind::kSynthetic) return prepare_synthetic(plan);
  auto t0 = std::chrono::steady_clock::now();
  Prepared p;
  p.plan = plan;
  if (plan.builtin) corpora::export_builtin_text(plan.source, plan.text_dir);
  const auto inputs = present_inputs(plan);
  throw_if_stopped();
  const std::string& dir = plan.out_dir;
  fs::make_dirs(dir);

  // Tokenizer(s): the joint one, or one per side of parallel text.
  const auto& tk = plan.tokenizer;
  if (tk.type == config::TokenizerType::kSpm && tk.model.empty()) {
    const bool joint = tk.joint;
    std::vector<std::pair<std::string, Side>> todo = {
        {"tokenizer", joint ? Side::kBoth : Side::kSource}};
    if (!joint) todo.emplace_back("tokenizer-target", Side::kTarget);
    for (const auto& [name, side] : todo) {
      const auto& files = inputs[0].files;
      throw_if_stopped();
      train_tokenizer(tk, dir, name, tokenizer_training_text(inputs, plan, side), threads,
                      side == Side::kTarget ? files.back() : files[0]);
      throw_if_stopped();
    }
  }
  std::unique_ptr<tokenizers::Tokenizer> tok = load_tokenizer(plan);
  std::unique_ptr<tokenizers::Tokenizer> target_tok = load_target_tokenizer(plan);
  const tokenizers::Tokenizer& ttok = target_tok ? *target_tok : *tok;
  const std::string fp = fingerprint(*tok, target_tok.get());

  // Datasets.
  for (const auto& si : inputs) {
    std::string out = join_path(dir, si.split + ".h5");
    std::string source_hash;
    for (const auto& f : si.files) source_hash += fs::hex64(fs::hash_file(f));
    if (si.files.size() > 2)  // shards: one hash of theirs (and of their names, in order)
      source_hash = fs::hex64(fs::hash_bytes(source_hash + [&] {
        std::string names;
        for (const auto& f : si.files) names += stdfs::path(f).filename().string() + "/";
        return names;
      }()));
    if (!plan.document_separator.empty())  // another separator: other documents
      source_hash += "-sep:" + plan.document_separator;
    if (plan.kind == config::DataKind::kLm && reads_jsonl(plan, si.files))
      source_hash += "-jsonl:" + plan.text_field;
    auto attrs = read_token_attrs(out);
    if (!attrs.empty() && attrs["source_hash"] == source_hash && attrs["tokenizer"] == fp &&
        attrs["format_version"] == std::to_string(kTokensFormatVersion)) {
      spdlog::info("{} up to date", out);
      p.splits[si.split] = out;
      continue;
    }
    TokenDataset ds = empty_dataset(plan.kind);
    ds.split = si.split;
    ds.tokenizer = fp;
    ds.tokenizer_kind = tok->kind();
    ds.vocab_size = std::max(tok->vocab_size(), ttok.vocab_size());
    ds.source_hash = source_hash;
    if (plan.kind == config::DataKind::kLm) {
      prepare_lm_split(plan, si, *tok, ds, out, threads);
      p.splits[si.split] = out;
      continue;
    }
    if (plan.kind == config::DataKind::kParallel) {
      auto [src, tgt] = text::read_parallel(si.files[0], si.files[1]);
      Progress bar("encode " + si.split, static_cast<int64_t>(2 * src.size()), "line");
      int64_t done = 0;
      auto a = encode_all(*tok, src, threads, &bar, &done);
      auto b = encode_all(ttok, tgt, threads, &bar, &done);
      bar.finish();
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].empty() || b[i].empty()) continue;  // drop pairs with an empty side
        ds.parallel().src.push(a[i]);
        ds.parallel().tgt.push(b[i]);
      }
    } else {
      const auto& gt = plan.glue;
      auto& g = ds.glue();
      auto gf = corpora::read_glue_tsv(si.files[0], gt);
      if (gf.skipped_rows > 0)
        spdlog::warn("{}: skipped {} malformed rows", si.files[0], gf.skipped_rows);
      std::vector<std::string> a, b, c;
      for (const auto& e : gf.examples)
        a.push_back(e.a), b.push_back(e.b), c.push_back(e.c), g.labels.push_back(e.label);
      const int64_t texts = gt.ranking() ? 3 : 2;
      Progress bar("encode " + si.split, static_cast<int64_t>(texts * a.size()), "text");
      int64_t done = 0;
      auto ea = encode_all(*tok, a, threads, &bar, &done);
      auto eb = encode_all(*tok, b, threads, &bar, &done);
      auto ec = gt.ranking() ? encode_all(*tok, c, threads, &bar, &done)
                             : std::vector<std::vector<int32_t>>{};
      bar.finish();
      for (size_t i = 0; i < ea.size(); ++i) {
        g.a.push(ea[i]), g.b.push(eb[i]);
        if (gt.ranking()) g.c.push(ec[i]);
      }
      ds.task = gt.name;
      ds.num_labels = gt.regression ? 0 : static_cast<int64_t>(gt.label_names.size());
    }
    throw_if_stopped();
    write_tokens(out, ds);
    int64_t ntok = 0, nseq = 0;
    for (const auto& [name, r] : ds.groups())
      ntok += static_cast<int64_t>(r->tokens.size()), nseq = r->size();
    spdlog::info("wrote {}: {} sequences, {} tokens", out, nseq, ntok);
    p.splits[si.split] = out;
  }
  spdlog::info("prepare finished in {:.1f} s",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return p;
}

Data::Data(const Plan& plan, int threads, bool run_prepare)
    : prepared_(run_prepare ? prepare(plan, threads) : prepared_paths(plan)),
      tok_(load_tokenizer(plan)),
      target_tok_(load_target_tokenizer(plan)) {}

TokenDataset Data::split(const std::string& name) const {
  return load_split(prepared_, name, fingerprint(*tok_, target_tok_.get()));
}

}  // namespace ropelab::data
