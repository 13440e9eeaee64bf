#include "tokenizers/vocab_order.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizers/wordpiece.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::tokenizers {

std::vector<int64_t> special_first_order(int64_t vocab, std::array<int64_t, 7> specials,
                                         const std::vector<int64_t>& fillers) {
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
  size_t next_filler = 0;
  for (auto& s : specials) {
    if (s >= 0) continue;
    while (next_filler < fillers.size() &&
           (fillers[next_filler] < 0 || fillers[next_filler] >= vocab ||
            taken[static_cast<size_t>(fillers[next_filler])]))
      ++next_filler;
    if (next_filler < fillers.size()) {
      s = fillers[next_filler];
      taken[static_cast<size_t>(s)] = true;
      continue;
    }
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

std::vector<int64_t> read_vocab_order(const std::string& path) {
  std::vector<int64_t> order;
  try {
    order = nlohmann::json::parse(fs::read_file(path)).get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception&) {
    throw UserError(path + ": not a vocabulary order (a JSON list of token ids)");
  }
  std::vector<bool> seen(order.size(), false);
  for (int64_t id : order) {
    if (id < 0 || id >= static_cast<int64_t>(order.size()) || seen[static_cast<size_t>(id)])
      throw UserError(path + ": not a permutation of the vocabulary's ids (" + std::to_string(id) +
                      ")");
    seen[static_cast<size_t>(id)] = true;
  }
  return order;
}

std::vector<int32_t> invert_order(const std::vector<int64_t>& order) {
  std::vector<int32_t> inv(order.size());
  for (size_t r = 0; r < order.size(); ++r)
    inv[static_cast<size_t>(order[r])] = static_cast<int32_t>(r);
  return inv;
}

std::vector<int64_t> run_vocab_order(const config::TokenizerConfig& t, int64_t vocab,
                                     const std::string& run_dir) {
  std::vector<int64_t> order;
  const std::string kept = run_dir + "/hf/vocab_order.json";
  if (t.type == config::TokenizerType::kWordPiece)
    order = wordpiece_order(read_vocab_txt(t.model), t.model);
  else if (!t.vocab_order.empty())
    order = read_vocab_order(t.vocab_order);
  else if (std::filesystem::is_regular_file(kept))
    order = read_vocab_order(kept);
  if (order.empty())
    for (int64_t i = 0; i < vocab; ++i) order.push_back(i);
  if (static_cast<int64_t>(order.size()) != vocab)
    throw UserError("the tokenizer's vocabulary order has " + std::to_string(order.size()) +
                    " ids, the model " + std::to_string(vocab));
  return order;
}

}  // namespace ropelab::tokenizers
