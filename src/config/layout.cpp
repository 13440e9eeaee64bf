#include "config/layout.h"

#include <algorithm>
#include <set>

namespace ropelab::config {

std::vector<std::string> layer_kinds(const LayoutConfig& layout, int64_t n_layers) {
  std::vector<std::string> out(static_cast<size_t>(n_layers));
  if (layout.kinds.empty()) return out;
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = layout.pattern.empty() ? layout.kinds.begin()->first
                                    : layout.pattern[i % layout.pattern.size()];
  return out;
}

std::vector<std::string> distinct_kinds(const std::vector<std::string>& kinds) {
  std::vector<std::string> out;
  for (const auto& k : kinds)
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  return out;
}

std::string position_summary(const ModelConfig& m) {
  const LayoutConfig& l = m.layout;
  if (l.kinds.empty()) return m.position.type();
  std::vector<std::string> order = l.pattern.empty()
                                       ? std::vector<std::string>{l.kinds.begin()->first}
                                       : distinct_kinds(l.pattern);
  std::string out;
  for (const auto& name : order) {
    auto it = l.kinds.find(name);
    if (it == l.kinds.end()) continue;
    const auto& k = it->second;
    const auto count = l.pattern.empty() ? 1 : std::count(l.pattern.begin(), l.pattern.end(), name);
    std::string what = k.position.type();
    if (k.window.has) what += ", window " + std::to_string(k.window.value);
    if (k.chunk.has) what += ", chunk " + std::to_string(k.chunk.value);
    if (k.temperature.scale > 0) what += ", temperature";
    out += (out.empty() ? "" : " + ") + (count > 1 ? std::to_string(count) + "x " : "") + name +
           " (" + what + ")";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> layout_problems(const ModelConfig& m) {
  std::vector<std::pair<std::string, std::string>> bad;
  const LayoutConfig& l = m.layout;
  std::vector<std::string> names;
  for (const auto& [name, kind] : l.kinds) names.push_back(name);
  if (l.kinds.empty()) {
    if (!l.pattern.empty())
      bad.emplace_back("model.layout.pattern",
                       "names kinds of layers, but model.layout.kinds defines none");
    return bad;
  }
  if (l.pattern.empty() && l.kinds.size() > 1)
    bad.emplace_back("model.layout.pattern", "with " + std::to_string(l.kinds.size()) + " kinds (" +
                                                 joined(names) +
                                                 "), the pattern must say which layer is which "
                                                 "(e.g. [" +
                                                 names[0] + ", " + names[1] + "])");
  for (size_t i = 0; i < l.pattern.size(); ++i)
    if (l.kinds.count(l.pattern[i]) == 0)
      bad.emplace_back("model.layout.pattern[" + std::to_string(i) + "]",
                       "unknown kind '" + l.pattern[i] +
                           "' (model.layout.kinds defines: " + joined(names) + ")");
  const int64_t layers = std::max(m.n_layers, m.arch == Arch::kEncDec ? m.n_decoder_layers : 0);
  if (static_cast<int64_t>(l.pattern.size()) > layers)
    bad.emplace_back("model.layout.pattern",
                     "lists " + std::to_string(l.pattern.size()) + " layers, but the model has " +
                         std::to_string(layers) + ": the rest of the pattern would never be used");
  const bool linear = m.attention.kernel == AttentionKernel::kLinear;
  for (const auto& [name, kind] : l.kinds) {
    const std::string K = "model.layout.kinds." + name;
    if (kind.window.has && kind.chunk.has)
      bad.emplace_back(K + ".chunk", "a kind has a window or a chunk, not both");
    if (linear && (kind.window.has || kind.chunk.has))
      bad.emplace_back(K + (kind.window.has ? ".window" : ".chunk"),
                       "linear attention keeps one running sum over all past keys and cannot "
                       "leave keys out; windows and chunks need model.attention.kernel=softmax");
    if (linear && kind.temperature.scale > 0)
      bad.emplace_back(K + ".temperature.scale",
                       "a query temperature sharpens a softmax; linear attention has none");
  }
  // Positions added to the input embeddings happen once, before any layer: they cannot differ
  // between kinds.
  std::set<std::string> used(l.pattern.begin(), l.pattern.end());
  if (used.size() > 1)
    for (const auto& name : used) {
      auto it = l.kinds.find(name);
      if (it == l.kinds.end()) continue;
      const std::string type = it->second.position.type();
      if (type == "sinusoidal" || type == "learned")
        bad.emplace_back("model.layout.kinds." + name + ".position.type",
                         type +
                             " positions are added to the input embeddings, once for all "
                             "layers, so they cannot differ by kind; give the kinds positions "
                             "that act in attention (rope, t5, alibi, none, ...) or use one kind");
    }
  return bad;
}

}  // namespace ropelab::config
