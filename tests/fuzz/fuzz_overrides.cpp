// Command-line overrides (`key.path=value`, one per input line) over a valid base config: a
// Config or a UserError, nothing else.
#include <sstream>
#include <vector>

#include "config/loader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string base =
      fuzz::write_scratch("base.yaml", "task: {type: mlm, seq_len: 64}\nmodel: {arch: encoder}\n");
  std::vector<std::string> args;
  std::istringstream in(fuzz::as_string(data, size));
  for (std::string line; std::getline(in, line);) args.push_back(line);
  try {
    auto c = ropelab::config::load_config(base, ropelab::config::overrides_from_args(args));
    (void)ropelab::config::dump(c);
  } catch (const ropelab::UserError&) {
  }
  return 0;
}
