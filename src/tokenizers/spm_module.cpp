// libropelab_spm.so: SentencePiece behind the SpmBackend interface (see spm_api.h for why).
// This file must not include any libtorch header.
#include <fcntl.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <memory>

#include "tokenizers/spm_api.h"

namespace {

class Backend final : public ropelab::tokenizers::SpmBackend {
 public:
  bool train(const std::string& args, const std::string& log_path, std::string* err) override {
    // SentencePiece trains with LOG(INFO) lines on stderr: send them to a log file.
    int saved = dup(STDERR_FILENO);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    auto status = sentencepiece::SentencePieceTrainer::Train(args);
    if (saved >= 0) {
      dup2(saved, STDERR_FILENO);
      close(saved);
    }
    if (!status.ok()) {
      *err = status.ToString();
      return false;
    }
    return true;
  }

  bool load(const std::string& model_path, std::string* err) override {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    auto status = sp->Load(model_path);
    if (!status.ok()) {
      *err = status.ToString();
      return false;
    }
    sp_ = std::move(sp);
    return true;
  }

  bool encode(const std::string& text, std::vector<int>* ids, std::string* err) const override {
    if (!sp_) return *err = "no model loaded", false;
    auto status = sp_->Encode(text, ids);
    if (!status.ok()) return *err = status.ToString(), false;
    return true;
  }

  bool decode(const std::vector<int>& ids, std::string* text, std::string* err) const override {
    if (!sp_) return *err = "no model loaded", false;
    auto status = sp_->Decode(ids, text);
    if (!status.ok()) return *err = status.ToString(), false;
    return true;
  }

  int piece_size() const override { return sp_ ? sp_->GetPieceSize() : 0; }
  std::string id_to_piece(int id) const override { return sp_ ? sp_->IdToPiece(id) : ""; }
  int piece_to_id(const std::string& piece) const override {
    return sp_ ? sp_->PieceToId(piece) : -1;
  }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) ropelab::tokenizers::SpmBackend*
ropelab_spm_create() {
  return new Backend();  // NOLINT: ownership passes to the caller
}
