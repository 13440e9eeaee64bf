#include "text/vocab_order.h"

#include <string>

#include "util/error.h"

namespace ropelab::text {

std::vector<int64_t> special_first_order(int64_t vocab, std::array<int64_t, 7> specials) {
  std::vector<bool> taken(static_cast<size_t>(vocab), false);
  for (auto s : specials) {
    if (s < -1 || s >= vocab)
      throw UserError("special token id " + std::to_string(s) + " is outside the vocabulary of " +
                      std::to_string(vocab));
    if (s >= 0) {
      if (taken[static_cast<size_t>(s)])
        throw UserError("special token id " + std::to_string(s) + " names two special tokens");
      taken[static_cast<size_t>(s)] = true;
    }
  }
  int64_t next_free = 0;
  for (auto& s : specials) {
    if (s >= 0) continue;
    while (next_free < vocab && taken[static_cast<size_t>(next_free)]) ++next_free;
    if (next_free == vocab) throw UserError("the vocabulary is too small for ropelab's specials");
    s = next_free;
    taken[static_cast<size_t>(next_free)] = true;
  }
  std::vector<int64_t> order(specials.begin(), specials.end());
  for (int64_t i = 0; i < vocab; ++i)
    if (!taken[static_cast<size_t>(i)]) order.push_back(i);
  return order;
}

}  // namespace ropelab::text
