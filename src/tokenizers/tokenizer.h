// Tokenizers: SentencePiece (BPE or unigram, through the isolated module) and byte-level.
// Both use the same special-token ids, so tasks never ask which tokenizer they got.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ropelab::tokenizers {

// Fixed special ids (SentencePiece models trained by ropelab use the same ones).
struct Special {
  static constexpr int32_t kPad = 0, kUnk = 1, kBos = 2, kEos = 3, kCls = 4, kSep = 5, kMask = 6;
  static constexpr int32_t kCount = 7;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;  // specials dropped
  virtual int64_t vocab_size() const = 0;
  virtual std::string kind() const = 0;         // "spm" or "byte"
  virtual std::string fingerprint() const = 0;  // changes whenever ids would change
  virtual std::string piece(int32_t id) const = 0;
};

// 256 byte values after the 7 specials: id = byte + 7.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kOffset = Special::kCount;
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return kOffset + 256; }
  std::string kind() const override { return "byte"; }
  std::string fingerprint() const override { return "byte-v1"; }
  std::string piece(int32_t id) const override;
};

class SpmBackend;

// A SentencePiece model. Trained by ropelab, its ids are ropelab's own. Another model (an
// imported checkpoint's tokenizer.model) comes with `order` (tokenizers::special_first_order:
// ropelab id r is the model's id order[r]), through which every id is re-numbered.
class SpmTokenizer final : public Tokenizer {
 public:
  // UserError if it cannot load, or (without `order`) lacks ropelab's special ids.
  explicit SpmTokenizer(const std::string& model_path, std::vector<int64_t> order = {});
  ~SpmTokenizer() override;
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_; }
  std::string kind() const override { return "spm"; }
  std::string fingerprint() const override { return fingerprint_; }
  std::string piece(int32_t id) const override;

 private:
  std::unique_ptr<SpmBackend> backend_;
  std::string path_, fingerprint_;
  int64_t vocab_ = 0;
  std::vector<int64_t> order_;  // empty: ropelab's own ids
  std::vector<int32_t> to_ropelab_;
};

struct SpmTrainOptions {
  int64_t vocab_size = 8000;
  std::string model_type = "bpe";  // or "unigram"
  double character_coverage = 1.0;
  int threads = 2;
};
// Trains `<prefix>.model` / `<prefix>.vocab` from a text file (one sentence per line), with
// ropelab's special ids. Writes atomically: a failure leaves no model behind.
void train_spm(const std::string& input, const std::string& prefix, const SpmTrainOptions& opt);

// Path of the SentencePiece module (ROPELAB_SPM_MODULE, else next to the executable).
std::string spm_module_path();
// Opens the module and creates a backend; UserError with a hint if the module is missing.
std::unique_ptr<SpmBackend> make_spm_backend();

}  // namespace ropelab::tokenizers
