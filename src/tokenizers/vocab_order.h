// Vocabularies that ropelab did not make (an imported checkpoint's tokenizer) re-numbered onto
// ropelab's fixed special ids (tokenizers::Special), so that every task finds [PAD], [CLS],
// [MASK]... where it expects them. Torch-free.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "config/schema.h"

namespace ropelab::tokenizers {

// The re-numbering of a vocabulary that was not made by ropelab (an imported checkpoint's):
// ropelab's 7 special ids first, each taking the vocabulary's id given in `specials` (pad, unk,
// bos, eos, cls, sep, mask; -1: it has none, which then takes the lowest id no other special
// uses), then every other id in increasing order. ropelab id r is the vocabulary's id
// order[r]. UserError if an id is out of range or names two specials.
// `fillers`: ids to give, in this order, to the specials the vocabulary lacks before the lowest
// free ids (tokens that text never produces: a tokenizer's unused special tokens, or rows past
// the tokenizer's end in a padded embedding).
std::vector<int64_t> special_first_order(int64_t vocab, std::array<int64_t, 7> specials,
                                         const std::vector<int64_t>& fillers = {});

// A vocabulary order as import-hf writes it (RUN/hf/vocab_order.json: a JSON list of ids, a
// permutation of 0..n-1). UserError naming the file if it is missing or not a permutation.
std::vector<int64_t> read_vocab_order(const std::string& path);
// The inverse: the vocabulary's id -> ropelab's id.
std::vector<int32_t> invert_order(const std::vector<int64_t>& order);
// A run's vocabulary order: the wordpiece tokenizer's own, an imported tokenizer's
// (data.tokenizer.vocab_order), an imported run's without a tokenizer (RUN/hf/vocab_order.json),
// or ropelab's (identity). UserError when its size is not the model's `vocab`.
std::vector<int64_t> run_vocab_order(const config::TokenizerConfig& t, int64_t vocab,
                                     const std::string& run_dir);

}  // namespace ropelab::tokenizers
