// `ropelab config --schema`: every key with its default and help text, then each variant's
// options (position modules, layer kinds, RoPE scaling methods, tasks), as commented YAML.
#include "config/loader.h"
#include "config/yaml_io.h"

namespace ropelab::config {

using io::Writer;

namespace {
template <class T>
std::string commented(T& x) {
  YAML::Emitter o;
  Writer w(o, /*comments=*/true);
  o << YAML::BeginMap;
  x.visit(w);
  o << YAML::EndMap;
  return o.c_str();
}
}  // namespace

std::string schema() {
  Config c;
  YAML::Emitter out;
  Writer w(out, /*comments=*/true);
  out << YAML::BeginMap;
  c.visit(w);
  out << YAML::EndMap;
  std::string s = out.c_str();
  s += "\n\n# Position module options, by model.position.type:\n";
  for (const auto& n : variant_names<PositionVariant>()) {
    PositionConfig p;
    select_variant(p.opts, n);
    s += "# --- " + n + "\n" + commented(p) + "\n";
  }
  s += "\n# A layer kind's options, under model.layout.kinds.<name> (its position section as "
       "above):\n";
  {
    LayerKindConfig k;
    s += commented(k) + "\n";
  }
  s += "\n# RoPE context-extension options, by model.position.scaling.type:\n";
  for (const auto& n : variant_names<RopeScalingVariant>()) {
    RopeScalingConfig r;
    select_variant(r.opts, n);
    s += "# --- " + n + "\n" + commented(r) + "\n";
  }
  s += "\n# Task options, by task.type:\n";
  for (const auto& n : variant_names<TaskVariant>()) {
    TaskConfig t;
    select_variant(t.opts, n);
    s += "# --- " + n + "\n" + commented(t) + "\n";
  }
  return s;
}

}  // namespace ropelab::config
