// MANIFEST.json, the commit mark of a checkpoint: written last, it names every file of the
// checkpoint with its xxh64. A checkpoint is used only if its manifest parses and every file
// matches. The parser is strict (it reads what may be a damaged or hand-edited file) and is
// fuzzed (tests/fuzz).
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace ropelab::weights {

struct Manifest {
  int64_t step = 0;
  std::map<std::string, std::string> files;  // plain file name -> xxh64 as 16 hex digits
};

std::string manifest_json(const Manifest& m);
// Throws UserError saying what is wrong unless `text` is a JSON object with an integer
// "step" >= 0 and "files" mapping plain file names (no '/', not "." or "..") to 16 lowercase
// hex digits, model.pt and state.json among them.
Manifest parse_manifest(const std::string& text);

}  // namespace ropelab::weights
