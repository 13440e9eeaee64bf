// Synthetic length-generalisation probes: token sequences generated from a seed, with the
// positions of the answer marked. No download; one small fixed vocabulary for all of them.
//
//   copy      BOS x1 .. xn > x1 .. xn EOS              n letters     (Kazemnejad et al. 2023)
//   reverse   BOS x1 .. xn > xn .. x1 EOS              n letters     (Kazemnejad et al. 2023)
//   addition  BOS a + b = s EOS                        n digits per addend; the sum s is
//             written least significant digit first (as in Lee et al. 2023, so that each
//             digit depends only on digits already seen)
//   mqar      BOS k1 v1 .. kn vn | q1 v(q1) .. qn v(qn) EOS
//             n key-value pairs (distinct keys, 128 keys and 128 values), then every key once
//             more in random order, each followed by its value (Zoology: Arora et al. 2023)
//   passkey   BOS filler [key sentence at depth] filler What is the pass key ? The pass key
//             is d d d d d EOS, n tokens in all (YaRN's protocol: Peng et al. 2023). The filler
//             is "The grass is green . The sky is blue . The sun is yellow . Here we go . There
//             and back again ." repeated; the key sentence "The pass key is K . Remember it .
//             K is the pass key ." with K a random 5-digit key, one token per digit.
//
//   selective-copy  BOS x1 .. xn > y1 .. ym EOS      n positions, m = ceil(n/4) of them letters
//             and the rest "."; the output is the letters in order (selective copying: Arora et
//             al. 2023; Gu & Dao 2023; CoPE's Golovneva et al. 2024)
//   counting  BOS x1 .. xn ? q = c EOS                  n letters of a..e; c counts q among them,
//             least significant digit first (CoPE's counting)
//   flipflop  BOS o1 b1 .. on bn EOS                    n instructions: o is w (write bit b), i
//             (ignore b) or r (read: b is the last bit written); the first writes, the last
//             reads, the others write or read with probability 0.1 each (Liu et al. 2023's
//             sparse flip-flop language); at least 6 instructions
//   niah      BOS filler [K is V .] filler What is K ? V EOS, n tokens in all: RULER's needle in
//             a haystack (Hsieh et al. 2024) with numeric keys (K: 4 digits) and values (V: 7
//             digits), the needle at the asked depth, in the passkey filler repeated
//   niah-multikey  the same with four needles of distinct keys; the asked one at the depth, the
//             three distractors at uniform places
//   vt        BOS filler .. A = V . .. B = A . .. C = B . .. D = C . .. What is D ? V EOS, n
//             tokens in all: RULER's variable tracking, two chains of four variables (keys
//             k0..k127, V five digits) interleaved at uniform places; the first chain is asked
//   grid      BOS . . . . . . . x11 .. x18 .. xn1 .. xn8 ? K = y EOS: a row-major grid of n rows
//             and 8 columns of letters, after a header row (BOS and 7 "."), so that cell (r, c)
//             is at position 8 r + c, rows counted from 1; one cell not in the last row holds a
//             marker key K, and y is the letter directly below it. With model.position.type
//             mrope and grid_width 8 the grid's rows and columns are the model's coordinates.
//
// Scored (answer) tokens: copy, reverse, addition, selective copy and counting: the output and
// its EOS; mqar: each queried value; flipflop: the bit of each read; passkey: the five digits of
// the key; niah: the seven digits of the value; vt: the five digits; grid: the letter and EOS. A
// model is right on an example when it predicts every scored token from the tokens before it
// (teacher-forced exact match, which for greedy decoding is the same thing: decoding reproduces the
// answer exactly when each of its tokens is the argmax given the right prefix).
//
// Splits are disjoint by construction: an example belongs to the split its content hash picks
// (6/8 train, 1/8 valid, 1/8 test), and the generator draws again until it lands in the split
// it is asked for. The probe's long examples are drawn for the test split.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/schema.h"
#include "data/tokens.h"
#include "tokenizers/tokenizer.h"

namespace ropelab::data::synthetic {

enum class Split { kTrain = 0, kValid = 1, kTest = 2 };

struct Example {
  std::vector<int32_t> tokens;
  std::vector<int32_t> scored;  // 1 where tokens[i] is an answer token
};

// The grid probe's width (columns per row).
constexpr int64_t kGridWidth = 8;

// Smallest instance size of a source (passkey, niah, vt: the prompt without filler).
int64_t min_size(config::DataSource src);
// Whether examples take a needle depth (passkey, niah, niah-multikey): the probe's depth grid.
bool has_depth(config::DataSource src);
// Largest instance size (mqar: the number of distinct keys).
int64_t max_size(config::DataSource src);
// Tokens of the longest example of `size`.
int64_t max_tokens(config::DataSource src, int64_t size);

// The split an example belongs to (its content hash).
Split split_of(const Example& e);

// One example of `size` in `split`, a pure function of (src, size, key, split, depth). Passkey
// and niah: depth in [0, 1] puts the (asked) needle that far into the filler; < 0 draws it
// uniformly.
// UserError when `size` is out of range, or when no example of `size` falls in `split`.
Example generate(config::DataSource src, int64_t size, uint64_t key, Split split,
                 double depth = -1);

// `count` examples, sizes uniform in [lo, hi], example i drawn from (seed, split, i). The same
// arguments always give the same examples.
std::vector<Example> make_examples(config::DataSource src, Split split, int64_t count, int64_t lo,
                                   int64_t hi, uint64_t seed, double depth = -1);

// A synthetic TokenDataset (kind "synthetic") holding `examples`.
TokenDataset to_dataset(const std::vector<Example>& examples, const std::string& split);

// Scoring of outputs: the fraction of examples whose every scored token equals `predicted` at
// that position (predicted[i] is the model's guess for tokens[i]), and of scored tokens.
struct Score {
  int64_t examples = 0, exact = 0, tokens = 0, correct = 0;
};
Score score(const std::vector<Example>& examples,
            const std::vector<std::vector<int32_t>>& predicted);

// The fixed vocabulary: the 7 specials, digits, letters, mqar keys k0..k127 and values
// v0..v127, the separators > + = | . ? and the passkey words. Text is space-separated symbols.
class SyntheticTokenizer final : public tokenizers::Tokenizer {
 public:
  SyntheticTokenizer();
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::string kind() const override { return "synthetic"; }
  std::string fingerprint() const override { return "synthetic-v1"; }
  std::string piece(int32_t id) const override;
  int32_t id(const std::string& symbol) const;  // kUnk if unknown
};

}  // namespace ropelab::data::synthetic
