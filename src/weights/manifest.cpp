#include "weights/manifest.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ropelab::weights {

using json = nlohmann::json;

std::string manifest_json(const Manifest& m) {
  json j = {{"step", m.step}, {"files", json::object()}};
  for (const auto& [name, hash] : m.files) j["files"][name] = hash;
  return j.dump(2);
}

namespace {
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}
bool hex_digest(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}
}  // namespace

Manifest parse_manifest(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw UserError("MANIFEST.json is not valid JSON");
  if (!j.is_object()) throw UserError("MANIFEST.json is not a JSON object");
  Manifest m;
  auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0)
    throw UserError("MANIFEST.json has no step (an integer >= 0)");
  m.step = step->get<int64_t>();
  auto files = j.find("files");
  if (files == j.end() || !files->is_object()) throw UserError("MANIFEST.json has no files object");
  for (const auto& [name, hash] : files->items()) {
    if (!plain_file_name(name))
      throw UserError("MANIFEST.json names '" + name + "', which is not a plain file name");
    if (!hash.is_string() || !hex_digest(hash.get<std::string>()))
      throw UserError("MANIFEST.json: the checksum of " + name + " is not 16 hex digits");
    m.files[name] = hash.get<std::string>();
  }
  for (const char* required : {"model.pt", "state.json"})
    if (m.files.count(required) == 0)
      throw UserError(std::string("MANIFEST.json does not list ") + required);
  return m;
}

}  // namespace ropelab::weights
