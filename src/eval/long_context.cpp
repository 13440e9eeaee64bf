// Sliding-window perplexity and zero-shot passkey retrieval (eval/long_context.h).
#include "eval/long_context.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/prepare.h"
#include "eval/evaluate.h"
#include "model/transformer.h"
#include "run/run.h"
#include "tokenizers/tokenizer.h"
#include "util/device.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/progress.h"
#include "util/random.h"
#include "util/signals.h"

namespace ropelab::eval {

namespace stdfs = std::filesystem;

std::vector<SlidingWindow> sliding_windows(int64_t n, int64_t window, int64_t stride) {
  if (window < 2) throw UserError(fmt::format("window {}: a window needs 2 tokens", window));
  if (stride < 1 || stride >= window)
    throw UserError(fmt::format(
        "stride {} must be at least 1 and less than the window ({}), so that every window "
        "overlaps the one before it and every token is scored",
        stride, window));
  std::vector<SlidingWindow> out;
  int64_t prev_end = 0;
  for (int64_t begin = 0; prev_end < n; begin += stride) {
    SlidingWindow w{begin, std::min(begin + window, n), std::max(prev_end, begin + 1)};
    if (w.first < w.end) out.push_back(w);
    prev_end = w.end;
  }
  return out;
}

namespace {

// A trained or imported causal LM, opened for evaluation (rope_scaling as `eval`), under the run's
// lock when the report is saved.
struct OpenLm {
  fs::DirLock lock;
  run::Run run;
};
OpenLm open_lm(const std::string& run_dir, const LmSource& src, run::DataUse data,
               const char* what) {
  if (!fs::exists((stdfs::path(run_dir) / "config.yaml").string()))
    throw UserError(run_dir + ": not a ropelab run (no config.yaml)");
  OpenLm o;
  if (src.save)
    o.lock = fs::DirLock::acquire(run_dir, what, fs::DirLock::Wait::kNo,
                                  "--no-save only prints, and needs no lock");
  o.run = run::open_trained(run_dir, data, src.use_best,
                            run_rope_scaling_overrides(run_dir, src.rope_scaling),
                            [&](const config::Config& c) {
                              if (c.model.arch != config::Arch::kDecoder)
                                throw UserError(run_dir + ": " + what +
                                                " needs a causal LM (a decoder); this run's "
                                                "model.arch is " +
                                                config::to_string(c.model.arch));
                            });
  o.run.model->eval();
  return o;
}

std::vector<int64_t> default_lengths(const std::vector<int64_t>& given, int64_t seq_len) {
  if (!given.empty()) return given;
  std::vector<int64_t> out;
  for (int64_t m : {1, 2, 4, 8, 16}) out.push_back(m * seq_len);
  return out;
}

std::string report_name(const std::string& stem, const std::string& rope_scaling) {
  return stem + (rope_scaling.empty() ? "" : "-" + rope_scaling_tag(rope_scaling)) + ".json";
}

// The summed NLL of targets [w.first, w.end) of `seq` (float64 on the host).
double window_nll(model::ModelImpl& m, const std::vector<int32_t>& seq, const SlidingWindow& w,
                  torch::Device dev, bool bf16) {
  std::vector<int64_t> in(seq.begin() + w.begin, seq.begin() + w.end);
  auto tokens_1T = torch::tensor(in, torch::kLong).unsqueeze(0).to(dev);
  torch::Tensor logits_TV;
  {
    device::Autocast ac(dev, bf16);
    auto h_1TD = m.backbone->decode(tokens_1T);
    // Position t - 1 predicts token t: the rows [first-1, end-1) of the window.
    auto rows = h_1TD.slice(1, w.first - 1 - w.begin, w.end - 1 - w.begin);
    logits_TV = m.logits(rows)[0];
  }
  auto logp_TV = torch::log_softmax(logits_TV.to(torch::kCPU, torch::kFloat64), -1);
  std::vector<int64_t> next(seq.begin() + w.first, seq.begin() + w.end);
  auto next_T1 = torch::tensor(next, torch::kLong).unsqueeze(1);
  return -logp_TV.gather(1, next_T1).sum().item<double>();
}

void save_perplexity(const PerplexityReport& r) {
  nlohmann::json j = {{"checkpoint", r.checkpoint}, {"split", r.split},
                      {"stride", r.stride},         {"doc_tokens", r.doc_tokens},
                      {"documents", r.documents},   {"train_seq_len", r.train_seq_len}};
  if (!r.rope_scaling.empty()) j["rope_scaling"] = r.rope_scaling;
  for (const auto& row : r.rows)
    j["windows"].push_back({{"window", row.window},
                            {"applicable", row.applicable},
                            {"nll", row.nll},
                            {"ppl", std::exp(row.nll)},
                            {"targets", row.targets}});
  fs::write_file_atomic(
      (stdfs::path(r.run_dir) / report_name("perplexity-" + r.split, r.rope_scaling)).string(),
      j.dump(2) + "\n");
}

// The documents to read: a prepared split of the run's data, or a text file tokenized with the
// run's tokenizer (a document per line, or as the separator divides it).
data::Documents source_documents(const run::Run& rm, const std::string& run_dir,
                                 const PerplexityOptions& o) {
  if (!o.text.empty()) {
    if (!fs::exists(o.text)) throw UserError(o.text + ": no such file (--text)");
    const auto tok = data::load_tokenizer(rm.plan);
    data::Documents out;
    for (const auto& doc : data::read_documents(o.text, o.separator)) out.push(tok->encode(doc));
    if (out.size() == 0) throw UserError(o.text + ": no text (--text)");
    return out;
  }
  if (!rm.data->has_split(o.split))
    throw UserError(run_dir + ": its data has no '" + o.split + "' split");
  auto ds = rm.data->split(o.split);
  if (ds.kind() != config::DataKind::kLm)
    throw UserError(run_dir + ": split '" + o.split + "' is not language-model text");
  return std::move(ds.lm().text);
}

}  // namespace

PerplexityReport sliding_perplexity(const std::string& run_dir, const PerplexityOptions& o) {
  auto lm = open_lm(run_dir, o.source, o.text.empty() ? run::DataUse::kOpen : run::DataUse::kNone,
                    "perplexity");
  auto& rm = lm.run;
  PerplexityReport r;
  r.run_dir = run_dir;
  r.checkpoint = rm.checkpoint;
  r.split = o.text.empty() ? o.split : "text-" + stdfs::path(o.text).stem().string();
  r.rope_scaling = o.source.rope_scaling;
  r.train_seq_len = rm.config.task.seq_len;
  const auto windows = default_lengths(o.windows, r.train_seq_len);
  const int64_t largest = *std::max_element(windows.begin(), windows.end());
  const int64_t smallest = *std::min_element(windows.begin(), windows.end());
  r.stride = o.stride > 0 ? o.stride : std::max<int64_t>(1, smallest / 2);
  r.doc_tokens = o.doc_tokens > 0 ? o.doc_tokens : largest;
  if (r.stride >= smallest)
    throw UserError(
        fmt::format("--stride {} must be less than the smallest window ({})", r.stride, smallest));
  const data::Documents text = source_documents(rm, run_dir, o);
  // Each document as the clm task reads it: EOS opens it; its first doc_tokens tokens.
  std::vector<std::vector<int32_t>> docs;
  int64_t longest = 0;
  for (int64_t i = 0; i < text.size(); ++i) {
    longest = std::max(longest, text.length(i) + 1);
    if (text.length(i) + 1 < r.doc_tokens) continue;
    if (o.max_documents > 0 && static_cast<int64_t>(docs.size()) >= o.max_documents) continue;
    std::vector<int32_t> d(static_cast<size_t>(r.doc_tokens), tokenizers::Special::kEos);
    text.read(text.start(i), r.doc_tokens - 1, d.data() + 1);
    docs.push_back(std::move(d));
  }
  r.documents = static_cast<int64_t>(docs.size());
  r.documents_in_split = text.size();
  if (docs.empty())
    throw UserError(fmt::format(
        "{}: no document of {} has {} tokens (its longest has {}); HINT: a long-document source "
        "(data.source=bible-en-books, --text with --separator), or a smaller --doc-tokens",
        run_dir, o.text.empty() ? "split '" + o.split + "'" : o.text, r.doc_tokens, longest));
  const int64_t max_len = rm.model->backbone->position().max_len();
  const bool bf16 = rm.config.train.precision == config::Precision::kBf16;
  torch::NoGradGuard ng;
  for (int64_t W : windows) {
    PerplexityRow row;
    row.window = W;
    if (max_len > 0 && std::min(W, r.doc_tokens) > max_len) {
      row.applicable = false;
      r.rows.push_back(row);
      continue;
    }
    double sum = 0;
    for (const auto& d : docs) {
      for (const auto& w : sliding_windows(static_cast<int64_t>(d.size()), W, r.stride)) {
        sum += window_nll(*rm.model, d, w, rm.device, bf16);
        row.targets += w.end - w.first;
        signals::throw_if_stopped("perplexity of " + run_dir, "nothing written");
      }
    }
    row.nll = sum / static_cast<double>(row.targets);
    spdlog::info("window {}: ppl {:.3f} over {} tokens", W, std::exp(row.nll), row.targets);
    r.rows.push_back(row);
  }
  if (o.source.save) save_perplexity(r);
  return r;
}

std::string format_perplexity(const PerplexityReport& r) {
  std::string s = fmt::format(
      "{} ({}), split {}{}: sliding-window perplexity, stride {}, the first {} tokens of {} of "
      "{} documents; trained at {} tokens\n{:>8}  {:>10}  {:>10}  {:>10}\n",
      r.run_dir, r.checkpoint, r.split,
      r.rope_scaling.empty() ? "" : ", --rope-scaling " + r.rope_scaling, r.stride, r.doc_tokens,
      r.documents, r.documents_in_split, r.train_seq_len, "window", "NLL", "ppl", "targets");
  for (const auto& row : r.rows)
    s += row.applicable
             ? fmt::format("{:>8}  {:>10.4f}  {:>10.3f}  {:>10}\n", row.window, row.nll,
                           std::exp(row.nll), row.targets)
             : fmt::format("{:>8}  {:>10}  {:>10}  {:>10}\n", row.window, "n/a", "n/a", "-");
  return s;
}

// ---- passkey

PasskeyPrompt passkey_prompt(const PasskeyParts& parts, int64_t length, double depth) {
  const auto fixed = static_cast<int64_t>(1 + parts.intro.size() + parts.key_sentence.size() +
                                          parts.question.size());
  if (parts.filler.empty() || length <= fixed)
    throw UserError(fmt::format(
        "passkey: a prompt of {} tokens cannot hold its fixed parts ({} tokens) and any filler",
        length, fixed));
  const int64_t filler = length - fixed;
  const auto before = static_cast<int64_t>(std::llround(depth * static_cast<double>(filler)));
  auto fill = [&](std::vector<int32_t>& out, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      out.push_back(parts.filler[static_cast<size_t>(i) % parts.filler.size()]);
  };
  PasskeyPrompt p;
  p.ids.push_back(parts.start);
  p.ids.insert(p.ids.end(), parts.intro.begin(), parts.intro.end());
  fill(p.ids, before);
  p.key_at = static_cast<int64_t>(p.ids.size());
  p.ids.insert(p.ids.end(), parts.key_sentence.begin(), parts.key_sentence.end());
  fill(p.ids, filler - before);
  p.ids.insert(p.ids.end(), parts.question.begin(), parts.question.end());
  return p;
}

std::string first_number(const std::string& text) {
  auto b = std::find_if(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  auto e = std::find_if(b, text.end(), [](char ch) { return ch < '0' || ch > '9'; });
  return {b, e};
}

std::string passkey_key(uint64_t h, bool words) {
  if (!words) return std::to_string(10000 + h % 90000);
  static const char* kWords[] = {"one", "two",   "three", "four", "five",
                                 "six", "seven", "eight", "nine"};
  std::string key;
  for (int i = 0; i < 5; ++i, h /= 9) key += std::string(i ? " " : "") + kWords[h % 9];
  return key;
}

bool answer_matches(const std::string& answer, const std::string& key, bool words) {
  if (!words) return first_number(answer) == key;
  std::string got;
  int n = 0;
  std::string word;
  auto flush = [&] {
    if (word.empty() || n == 5) return;
    got += (n++ ? " " : "") + word;
    word.clear();
  };
  for (char ch : answer) {
    if (std::isalpha(static_cast<unsigned char>(ch)))
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    else
      flush();
  }
  flush();
  return got == key;
}

namespace {

const char* kIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "them. I will quiz you about the important information there.";
const char* kFiller =
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const char* kQuestion = " What is the pass key? The pass key is";

std::vector<int32_t> encode_checked(const tokenizers::Tokenizer& tok, const std::string& text) {
  auto ids = tok.encode(text);
  if (ids.empty()) throw UserError("passkey: the tokenizer encodes '" + text + "' as nothing");
  return ids;
}

// Greedy continuation of `prompt` through the key/value cache: up to `n` new tokens, stopping at
// an end of sequence.
std::vector<int32_t> greedy(model::ModelImpl& m, const std::vector<int32_t>& prompt, int64_t n,
                            torch::Device dev) {
  model::DecodeState state;
  std::vector<int64_t> in(prompt.begin(), prompt.end());
  auto next_1T = torch::tensor(in, torch::kLong).unsqueeze(0).to(dev);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    auto h_1TD = m.backbone->decode(next_1T, {}, {}, &state);
    auto logits_V = m.logits(h_1TD.slice(1, -1))[0][0];
    const auto id = static_cast<int32_t>(logits_V.argmax().item<int64_t>());
    if (id == tokenizers::Special::kEos) break;
    out.push_back(id);
    next_1T = torch::full({1, 1}, static_cast<int64_t>(id),
                          torch::TensorOptions().dtype(torch::kLong).device(dev));
  }
  return out;
}

void save_passkey(const PasskeyReport& r, const PasskeyOptions& o) {
  nlohmann::json j = {{"checkpoint", r.checkpoint},
                      {"train_seq_len", r.train_seq_len},
                      {"trials", o.trials},
                      {"key", r.words ? "words" : "digits"},
                      {"seed", o.seed}};
  if (!r.rope_scaling.empty()) j["rope_scaling"] = r.rope_scaling;
  for (const auto& c : r.cells)
    j["cells"].push_back({{"length", c.length},
                          {"depth", c.depth},
                          {"applicable", c.applicable},
                          {"correct", c.correct},
                          {"trials", c.trials}});
  fs::write_file_atomic((stdfs::path(r.run_dir) / report_name("passkey", r.rope_scaling)).string(),
                        j.dump(2) + "\n");
}

}  // namespace

PasskeyReport passkey_retrieval(const std::string& run_dir, const PasskeyOptions& o) {
  if (o.trials < 1) throw UserError("--trials must be at least 1");
  for (double d : o.depths)
    if (!(d >= 0 && d <= 1)) throw UserError(fmt::format("--depths: {} is not in [0, 1]", d));
  auto lm = open_lm(run_dir, o.source, run::DataUse::kNone, "passkey");
  auto& rm = lm.run;
  const auto tok = data::load_tokenizer(rm.plan);
  const std::string digits = tok->decode(tok->encode("0123456789"));
  const bool can_write_digits = digits.find("0123456789") != std::string::npos;
  if (o.key == PasskeyKey::kDigits && !can_write_digits)
    throw UserError(run_dir +
                    ": its tokenizer cannot write digits (\"0123456789\" comes back as \"" +
                    digits + "\"), so it cannot state a digit key; HINT: --key words");
  const bool words =
      o.key == PasskeyKey::kWords || (o.key == PasskeyKey::kAuto && !can_write_digits);
  PasskeyParts parts;
  parts.start = tokenizers::Special::kEos;
  parts.intro = encode_checked(*tok, kIntro);
  parts.filler = encode_checked(*tok, kFiller);
  parts.question = encode_checked(*tok, kQuestion);
  PasskeyReport r;
  r.run_dir = run_dir;
  r.checkpoint = rm.checkpoint;
  r.rope_scaling = o.source.rope_scaling;
  r.train_seq_len = rm.config.task.seq_len;
  r.words = words;
  const int64_t max_len = rm.model->backbone->position().max_len();
  const auto lengths = default_lengths(o.lengths, r.train_seq_len);
  torch::NoGradGuard ng;
  for (int64_t L : lengths) {
    for (double depth : o.depths) {
      PasskeyCell cell{L, depth, max_len <= 0 || L + 16 <= max_len, 0, 0};
      for (int64_t t = 0; cell.applicable && t < o.trials; ++t) {
        const uint64_t h = util::mix64(
            static_cast<uint64_t>(o.seed) * 1000003ull + static_cast<uint64_t>(L) * 131ull +
            static_cast<uint64_t>(std::llround(depth * 1000)) * 7ull + static_cast<uint64_t>(t));
        const std::string key = passkey_key(h, words);
        parts.key_sentence = encode_checked(
            *tok, " The pass key is " + key + ". Remember it. " + key + " is the pass key.");
        PasskeyPrompt prompt;
        try {
          prompt = passkey_prompt(parts, L, depth);
        } catch (const UserError&) {
          if (!o.short_na) throw;
          cell.applicable = false;
          break;
        }
        const auto new_tokens = static_cast<int64_t>(tok->encode(" " + key).size()) + 3;
        const std::string answer =
            tok->decode(greedy(*rm.model, prompt.ids, new_tokens, rm.device));
        if (r.example_answer.empty()) r.example_answer = answer;
        cell.correct += answer_matches(answer, key, words) ? 1 : 0;
        ++cell.trials;
        signals::throw_if_stopped("passkey of " + run_dir, "nothing written");
      }
      r.cells.push_back(cell);
    }
    spdlog::info("passkey at {} tokens done", L);
  }
  if (o.source.save) save_passkey(r, o);
  return r;
}

std::string format_passkey(const PasskeyReport& r) {
  std::vector<int64_t> lengths;
  std::vector<double> depths;
  for (const auto& c : r.cells) {
    if (std::find(lengths.begin(), lengths.end(), c.length) == lengths.end())
      lengths.push_back(c.length);
    if (std::find(depths.begin(), depths.end(), c.depth) == depths.end()) depths.push_back(c.depth);
  }
  std::string s = fmt::format(
      "{} ({}){}: zero-shot passkey accuracy (correct / trials; {} keys), by prompt length "
      "(columns) and depth (rows); trained at {} tokens\n{:>6}",
      r.run_dir, r.checkpoint, r.rope_scaling.empty() ? "" : ", --rope-scaling " + r.rope_scaling,
      r.words ? "number-word" : "5-digit", r.train_seq_len, "depth");
  for (int64_t L : lengths) s += fmt::format("  {:>8}", L);
  s += "\n";
  for (double d : depths) {
    s += fmt::format("{:>6.2f}", d);
    for (const auto& c : r.cells)
      if (c.depth == d)
        s += c.applicable ? fmt::format("  {:>8}", fmt::format("{}/{}", c.correct, c.trials))
                          : fmt::format("  {:>8}", "n/a");
    s += "\n";
  }
  s += "first answer: \"" + r.example_answer + "\"\n";
  return s;
}

}  // namespace ropelab::eval
