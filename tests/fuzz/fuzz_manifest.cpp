// The checkpoint manifest reader on arbitrary bytes: a Manifest or a UserError, nothing else.
// A manifest that parses names only plain files, and writing it back parses to the same.
#include "fuzz_util.h"
#include "util/error.h"
#include "weights/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ropelab::weights::Manifest m;
  try {
    m = ropelab::weights::parse_manifest(fuzz::as_string(data, size));
  } catch (const ropelab::UserError&) {
    return 0;
  }
  for (const auto& [name, hash] : m.files)
    if (name.find('/') != std::string::npos || name == ".." || name == ".")
      fuzz::violated("a file name that is not plain: " + name);
  try {
    auto again = ropelab::weights::parse_manifest(ropelab::weights::manifest_json(m));
    if (again.step != m.step || again.files != m.files) fuzz::violated("round trip differs");
  } catch (const ropelab::UserError& e) {
    fuzz::violated(std::string("a written manifest does not parse: ") + e.what());
  }
  return 0;
}
