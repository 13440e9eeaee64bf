// The narrow interface between ropelab and SentencePiece.
//
// Debian's libsentencepiece carries its own protobuf-lite 3.14 and exports its symbols; libtorch
// loads the system protobuf 3.21. Linked into one program they crash before main()
// (docs/platform-notes.md). So only the module libropelab_spm.so links SentencePiece, and
// ropelab opens it with dlopen(RTLD_LOCAL | RTLD_DEEPBIND): its protobuf copy stays private.
// Both sides are built by the same compiler in the same build, so a C++ interface is safe.
// No exceptions cross the boundary: failures come back as `false` + an error string.
#pragma once
#include <string>
#include <vector>

namespace ropelab::tokenizers {

class SpmBackend {
 public:
  virtual ~SpmBackend() = default;
  // Trains a model from SentencePiece's flag string ("--input=... --model_prefix=...").
  // Its chatter goes to `log_path`, not the terminal.
  virtual bool train(const std::string& args, const std::string& log_path, std::string* err) = 0;
  virtual bool load(const std::string& model_path, std::string* err) = 0;
  virtual bool encode(const std::string& text, std::vector<int>* ids, std::string* err) const = 0;
  virtual bool decode(const std::vector<int>& ids, std::string* text, std::string* err) const = 0;
  virtual int piece_size() const = 0;
  virtual std::string id_to_piece(int id) const = 0;
  virtual int piece_to_id(const std::string& piece) const = 0;  // unk id when absent
};

}  // namespace ropelab::tokenizers

// The module's one exported symbol.
extern "C" ropelab::tokenizers::SpmBackend* ropelab_spm_create();
