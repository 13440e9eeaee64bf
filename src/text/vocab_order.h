// Vocabularies that ropelab did not make (an imported checkpoint's tokenizer) re-numbered onto
// ropelab's fixed special ids (text::Special), so that every task finds [PAD], [CLS], [MASK]...
// where it expects them. Torch-free.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace ropelab::text {

// The re-numbering of a vocabulary that was not made by ropelab (an imported checkpoint's):
// ropelab's 7 special ids first, each taking the vocabulary's id given in `specials` (pad, unk,
// bos, eos, cls, sep, mask; -1: it has none, which then takes the lowest id no other special
// uses), then every other id in increasing order. ropelab id r is the vocabulary's id
// order[r]. UserError if an id is out of range or names two specials.
std::vector<int64_t> special_first_order(int64_t vocab, std::array<int64_t, 7> specials);

}  // namespace ropelab::text
