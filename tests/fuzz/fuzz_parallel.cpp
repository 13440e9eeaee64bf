// The parallel-text reader (WMT plain text: line i of the source translates line i of the
// target) on arbitrary bytes, split at the first NUL into the two files: aligned lines or a
// UserError, nothing else. Lines hold no line breaks and are valid UTF-8.
#include "fuzz_util.h"
#include "text/lines.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in = fuzz::as_string(data, size);
  const size_t cut = in.find('\0');
  const std::string src = in.substr(0, cut),
                    tgt = cut == std::string::npos ? "" : in.substr(cut + 1);
  try {
    auto p = ropelab::text::split_parallel(src, "train.en", tgt, "train.de");
    if (p.src.size() != p.tgt.size() || p.src.empty()) fuzz::violated("unaligned or empty");
    for (const auto* side : {&p.src, &p.tgt})
      for (const auto& l : *side)
        if (l.find('\n') != std::string::npos || ropelab::text::invalid_utf8_at(l) >= 0)
          fuzz::violated("a line with a line break or invalid UTF-8");
  } catch (const ropelab::UserError&) {
  }
  return 0;
}
