// The config of `integer` positions (model/position/integer.h): the position index itself,
// added to every channel of the embedding.
#pragma once
#include "config/positions/traits.h"
#include "config/visit.h"

namespace ropelab::config {

struct IntegerConfig : PositionTraits {  // the first failed attempt before sinusoids
  static constexpr bool kAddsToInput = true;
  static constexpr const char* kName = "integer";
  double gain = 1.0;
  template <class V>
  void visit(V& v) {
    v("gain", gain,
      "each channel gets gain * position (1: the raw index, which soon swamps the token "
      "embedding's entries of about 0.02)",
      at_least(0));
  }
};

}  // namespace ropelab::config
