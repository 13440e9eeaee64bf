// Long-context evaluation of a causal LM, trained here or imported, as the context-extension
// papers report it:
//
// - Sliding-window perplexity (Press et al. 2022's protocol, used on PG19 and Proof-pile by
//   position interpolation, Chen et al. 2023, arXiv:2306.15595; YaRN, Peng et al. 2023,
//   arXiv:2309.00071; LongRoPE, Ding et al. 2024, arXiv:2402.13753): a document is read by
//   windows of W tokens that start every S tokens; each window scores only the tokens the
//   previous one did not reach, so every token is scored once, with between W - S and W tokens
//   of context before it (all of them near the start), never window by window from scratch.
//   Every window starts at position 0, as transformers' perplexity recipe does.
// - Zero-shot passkey retrieval (Mohtashami & Jaggi 2023; the prompt of LongLoRA, Chen et al.
//   2023, arXiv:2309.12307, and YaRN): a 5-digit key hidden at a depth of repeated filler text,
//   asked for at the end, answered greedily by a model never trained on the task; accuracy by
//   prompt length and depth.
//
// A document is read as the causal LM task reads it in training: an end-of-sequence token
// opens it (data/batches.cpp), then its tokens; every token of the document is a target.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::eval {

// One window of the sliding protocol over a sequence: its inputs are [begin, end), and it scores
// the targets [first, end) (token t predicted from the inputs begin..t-1).
struct SlidingWindow {
  int64_t begin = 0, end = 0, first = 0;
};
// The windows over a sequence of n tokens (n >= 2) for window W and stride S (1 <= S < W):
// begin = 0, S, 2S, ... until a window reaches the end; first = max(previous end, begin + 1).
// Targets 1..n-1 are each scored exactly once, target t with min(t, W - S) tokens or more
// before it. UserError for S outside [1, W - 1] (S = W would leave each window's first token
// unscored, as transformers' recipe does).
std::vector<SlidingWindow> sliding_windows(int64_t n, int64_t window, int64_t stride);

// How both evaluations open the run: its best checkpoint (else the newest), a scaling switched
// on as `eval --rope-scaling` does, and whether the report is written into the run (holding its
// lock; without it, a run can be evaluated while it trains).
struct LmSource {
  bool use_best = true;
  std::string rope_scaling;
  bool save = true;
};

struct PerplexityOptions {
  std::string split = "test";
  // Instead of a split: a text file, tokenized with the run's tokenizer, a document per line or,
  // with `separator`, the lines between separator lines (data.document_separator's rule).
  std::string text, separator;
  std::vector<int64_t> windows;  // empty: 1, 2, 4, 8, 16 x task.seq_len
  int64_t stride = 0;            // 0: half the smallest window
  int64_t doc_tokens = 0;        // tokens read of each document; 0: the largest window
  int64_t max_documents = 0;     // 0: every document with doc_tokens tokens
  LmSource source;               // saves RUN/perplexity-SPLIT[-rope-...].json
};
struct PerplexityRow {
  int64_t window = 0;
  bool applicable = true;  // false: beyond a learned position table
  double nll = 0;          // mean nats per target token
  int64_t targets = 0;
};
struct PerplexityReport {
  std::string run_dir, checkpoint, split, rope_scaling;
  int64_t train_seq_len = 0, stride = 0, doc_tokens = 0;
  int64_t documents = 0, documents_in_split = 0;
  std::vector<PerplexityRow> rows;
};
// `ropelab perplexity`: every window size over the same documents and the same target tokens
// (each document's first doc_tokens tokens; shorter ones are left out), so the rows pair.
// UserError for a run that is not a causal LM, or a split (or text) without a document that
// long. The report is RUN/perplexity-SPLIT[-rope-...].json (a text file: SPLIT = text-STEM).
PerplexityReport sliding_perplexity(const std::string& run_dir, const PerplexityOptions& o);
std::string format_perplexity(const PerplexityReport& r);

// The passkey prompt in a tokenizer's ids: [start] + intro + filler + key sentence + filler +
// question, exactly `length` tokens, the key sentence after round(depth * filler) filler tokens
// (the filler is its sentences repeated, cut at a token). `key_at`: where the key sentence
// starts. UserError when `length` cannot hold the fixed parts.
struct PasskeyPrompt {
  std::vector<int32_t> ids;
  int64_t key_at = 0;
};
struct PasskeyParts {  // each part already tokenized
  std::vector<int32_t> intro, filler, key_sentence, question;
  int32_t start = 0;
};
PasskeyPrompt passkey_prompt(const PasskeyParts& parts, int64_t length, double depth);
// The first run of digits in `text` ("" if none): the model's answer.
std::string first_number(const std::string& text);
// The key of a trial's hash `h`: five digits (10000-99999), or five number words ("seven four
// one nine two", each of one to nine) for a tokenizer without digits (one that learned only the
// Bible's text, where numbers are words).
std::string passkey_key(uint64_t h, bool words);
// Whether `answer` states `key`: its first number equals a digit key; its first five words
// (lowercased, without punctuation) equal a word key.
bool answer_matches(const std::string& answer, const std::string& key, bool words);

// The key's form: digits where the tokenizer can write them, else words (auto); or as chosen.
enum class PasskeyKey { kAuto, kDigits, kWords };

struct PasskeyOptions {
  std::vector<int64_t> lengths;  // empty: 1, 2, 4, 8, 16 x task.seq_len
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int64_t trials = 5;  // keys per (length, depth)
  int64_t seed = 1;
  PasskeyKey key = PasskeyKey::kAuto;
  bool short_na = false;  // a length that cannot hold the prompt: an n/a cell, not an error
  LmSource source;        // saves RUN/passkey[-rope-...].json
};
struct PasskeyCell {
  int64_t length = 0;
  double depth = 0;
  bool applicable = true;
  int64_t correct = 0, trials = 0;
};
struct PasskeyReport {
  std::string run_dir, checkpoint, rope_scaling;
  int64_t train_seq_len = 0;
  bool words = false;              // the keys were number words
  std::vector<PasskeyCell> cells;  // by length, then depth
  std::string example_answer;      // the model's answer to the first prompt (for the log)
};
// `ropelab passkey`: greedy decoding through the key/value cache, up to the key's length in
// tokens plus 3. UserError for a run that is not a causal LM, or for digit keys with a
// tokenizer that cannot write digits.
PasskeyReport passkey_retrieval(const std::string& run_dir, const PasskeyOptions& o);
std::string format_passkey(const PasskeyReport& r);

}  // namespace ropelab::eval
