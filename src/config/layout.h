// Hybrid layouts (model.layout): which kind of layer each layer of a stack is. Gemma 3
// interleaves five sliding-window layers with one global one, Llama 4 a NoPE layer with three
// chunked RoPE ones, RNoPE-SWA (Yang et al. 2025, arXiv:2501.18795) three sliding RoPE layers
// with one global NoPE one; the pattern repeats over the layers.
#pragma once
#include <string>
#include <vector>

#include "config/schema.h"

namespace ropelab::config {

// The kind of each of a stack's n_layers layers: a name of layout.kinds, or all "" when the
// layout has no kinds (every layer as model.position says). Assumes a validated layout.
std::vector<std::string> layer_kinds(const LayoutConfig& layout, int64_t n_layers);

// The distinct kinds of `kinds`, in the order of their first layer.
std::vector<std::string> distinct_kinds(const std::vector<std::string>& kinds);

// The positions of a model in a few words, for logs and tables: model.position's type without
// a layout; with one, each kind in pattern order with its count, family and span
// ("3x local (rope, window 128) + global (none)").
std::string position_summary(const ModelConfig& m);

// The layout's problems: (key, message) pairs (unknown kinds in the pattern, a window and a
// chunk on one kind, a pattern longer than the model, ...). The kinds' position sections are
// checked by validate() like model.position.
std::vector<std::pair<std::string, std::string>> layout_problems(const ModelConfig& m);

}  // namespace ropelab::config
