// A config as YAML (dump: every key, defaults included, so that loading it gives the same
// config) and as dotted keys (flat_keys), through io::Writer (config/yaml_io.h).
#include "config/loader.h"
#include "config/yaml_io.h"

namespace ropelab::config {

using io::Writer;

namespace {
void flatten(const YAML::Node& n, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten(kv.second, prefix + kv.first.Scalar() + ".", out);
  } else {
    YAML::Emitter e;
    e << YAML::Flow << n;
    out[prefix.substr(0, prefix.size() - 1)] = e.c_str();
  }
}
}  // namespace

std::map<std::string, std::string> flat_keys(const Config& c) {
  std::map<std::string, std::string> out;
  flatten(YAML::Load(dump(c)), "", out);
  return out;
}

namespace {
template <class T>
std::string dump_any(const T& x) {
  YAML::Emitter out;
  Writer w(out);
  out << YAML::BeginMap;
  const_cast<T&>(x).visit(w);  // NOLINT: the writer only reads
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}
}  // namespace

std::string dump(const Config& c) { return dump_any(c); }

std::string dump(const Experiment& e) { return dump_any(e); }

}  // namespace ropelab::config
