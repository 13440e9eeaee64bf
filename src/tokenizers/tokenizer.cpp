#include "tokenizers/tokenizer.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "tokenizers/spm_api.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/platform.h"

namespace ropelab::tokenizers {

// ---- byte-level

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    ids[i] = static_cast<int32_t>(static_cast<unsigned char>(text[i])) + kOffset;
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  s.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= kOffset && id < kOffset + 256) s.push_back(static_cast<char>(id - kOffset));
  return s;
}

std::string ByteTokenizer::piece(int32_t id) const {
  static const char* kNames[] = {"<pad>", "<unk>", "<s>", "</s>", "[CLS]", "[SEP]", "[MASK]"};
  if (id >= 0 && id < kOffset) return kNames[id];
  if (id >= kOffset && id < kOffset + 256) return std::string(1, static_cast<char>(id - kOffset));
  return "<invalid>";
}

// ---- SentencePiece module

std::string spm_module_path() {
  if (const char* p = std::getenv("ROPELAB_SPM_MODULE")) return p;
  return platform::executable_dir() + "/libropelab_spm.so";
}

std::unique_ptr<SpmBackend> make_spm_backend() {
  static std::mutex mu;
  static void* handle = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (handle == nullptr) {
    std::string path = spm_module_path();
    // RTLD_DEEPBIND: the module resolves its own (SentencePiece's protobuf) symbols first.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr)
      throw UserError(path + ": cannot load the SentencePiece module (" + dlerror() +
                      "); HINT: build the 'ropelab_spm' target or set ROPELAB_SPM_MODULE");
  }
  using Create = SpmBackend* (*)();
  auto create = reinterpret_cast<Create>(dlsym(handle, "ropelab_spm_create"));  // NOLINT
  if (create == nullptr)
    throw UserError(spm_module_path() + ": not a ropelab SentencePiece module");
  return std::unique_ptr<SpmBackend>(create());
}

SpmTokenizer::SpmTokenizer(const std::string& model_path, std::vector<int64_t> order)
    : backend_(make_spm_backend()), path_(model_path), order_(std::move(order)) {
  if (!fs::exists(model_path)) throw UserError(model_path + ": no such SentencePiece model");
  std::string err;
  if (!backend_->load(model_path, &err))
    throw UserError(model_path + ": not a valid SentencePiece model (" + err + ")");
  vocab_ = backend_->piece_size();
  fingerprint_ = "spm-" + fs::hex64(fs::hash_file(model_path));
  if (!order_.empty()) {
    if (static_cast<int64_t>(order_.size()) != vocab_)
      throw UserError(model_path + ": has " + std::to_string(vocab_) +
                      " pieces but its vocabulary order lists " + std::to_string(order_.size()));
    to_ropelab_ = invert_order(order_);
    std::string ids;
    for (auto id : order_) ids += std::to_string(id) + ",";
    fingerprint_ += "-order-" + fs::hex64(fs::hash_bytes(ids));
    return;
  }
  // ropelab's tasks rely on the fixed special ids.
  if (backend_->piece_to_id("[MASK]") != Special::kMask ||
      backend_->piece_to_id("[CLS]") != Special::kCls ||
      backend_->id_to_piece(Special::kPad) != "<pad>")
    throw UserError(model_path +
                    ": SentencePiece model lacks ropelab's special ids (pad=0 unk=1 bos=2 eos=3 "
                    "[CLS]=4 [SEP]=5 [MASK]=6); HINT: train it with `ropelab prepare`, or give "
                    "data.tokenizer.vocab_order");
}

SpmTokenizer::~SpmTokenizer() = default;

std::vector<int32_t> SpmTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  std::string err;
  if (!backend_->encode(text, &ids, &err)) throw UserError(path_ + ": encode failed: " + err);
  std::vector<int32_t> out(ids.begin(), ids.end());
  if (!order_.empty())
    for (auto& id : out) id = to_ropelab_[static_cast<size_t>(id)];
  return out;
}

std::string SpmTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> in;
  in.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= Special::kCount && id < vocab_)
      in.push_back(order_.empty() ? id : static_cast<int>(order_[static_cast<size_t>(id)]));
  std::string text, err;
  if (!backend_->decode(in, &text, &err)) throw UserError(path_ + ": decode failed: " + err);
  return text;
}

std::string SpmTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_) return "<invalid>";
  return backend_->id_to_piece(order_.empty() ? id
                                              : static_cast<int>(order_[static_cast<size_t>(id)]));
}

void train_spm(const std::string& input, const std::string& prefix, const SpmTrainOptions& opt) {
  namespace stdfs = std::filesystem;
  if (!fs::exists(input)) throw UserError(input + ": no such file (tokenizer training input)");
  stdfs::path pre(prefix);
  fs::make_dirs(pre.parent_path().empty() ? "." : pre.parent_path().string());
  std::string tmp_prefix =
      (pre.parent_path() / ("." + pre.filename().string() + ".training")).string();
  std::string args = "--input=" + input + " --model_prefix=" + tmp_prefix +
                     " --vocab_size=" + std::to_string(opt.vocab_size) +
                     " --model_type=" + opt.model_type +
                     " --character_coverage=" + std::to_string(opt.character_coverage) +
                     " --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3"
                     " --control_symbols=[CLS],[SEP],[MASK]"
                     " --input_sentence_size=0 --shuffle_input_sentence=false"
                     " --num_threads=" +
                     std::to_string(std::max(1, opt.threads));
  auto backend = make_spm_backend();
  std::string err;
  std::string log = prefix + ".train.log";
  if (!backend->train(args, log, &err)) {
    std::remove((tmp_prefix + ".model").c_str());
    std::remove((tmp_prefix + ".vocab").c_str());
    throw UserError(input + ": SentencePiece training failed: " + err + " (log: " + log + ")");
  }
  // Commit: vocab first, model last (the model's presence marks a complete tokenizer).
  for (const char* ext : {".vocab", ".model"}) {
    fs::fsync_path(tmp_prefix + ext);
    if (std::rename((tmp_prefix + ext).c_str(), (prefix + ext).c_str()) != 0)
      throw UserError(prefix + ext + ": cannot move the trained tokenizer into place");
  }
}

}  // namespace ropelab::tokenizers
