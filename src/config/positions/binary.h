// The config of `binary` positions (model/position/binary.h): the position index's bits, one a
// channel, added to the embedding.
#pragma once
#include "config/positions/traits.h"
#include "config/visit.h"

namespace ropelab::config {

struct BinaryConfig : PositionTraits {  // the second failed attempt before sinusoids
  static constexpr bool kAddsToInput = true;
  static constexpr const char* kName = "binary";
  double gain = 1.0;
  template <class V>
  void visit(V& v) {
    v("gain", gain,
      "channel i gets gain * (bit i of the position): 0 or gain, changing in discrete jumps "
      "(channels past the 62nd stay 0)",
      at_least(0));
  }
};

}  // namespace ropelab::config
