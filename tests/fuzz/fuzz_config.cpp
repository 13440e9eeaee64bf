// The strict YAML config loader on arbitrary bytes: it returns a Config or throws UserError
// (ConfigError) naming the problem; anything else (a crash, another exception, a sanitizer
// report) is a bug. A config that loads must dump to YAML that loads to the same dump.
#include "config/loader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("config.yaml", fuzz::as_string(data, size));
  std::string dumped;
  try {
    dumped = ropelab::config::dump(ropelab::config::load_config(path));
  } catch (const ropelab::UserError&) {
    return 0;
  }
  const std::string again = fuzz::write_scratch("again.yaml", dumped);
  try {
    if (ropelab::config::dump(ropelab::config::load_config(again)) != dumped)
      fuzz::violated("dump(load(dump(c))) != dump(c)");
  } catch (const ropelab::UserError& e) {
    fuzz::violated(std::string("the dump of a valid config does not load: ") + e.what());
  }
  return 0;
}
