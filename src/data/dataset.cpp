// TokenDataset's typed views (data/tokens.h); the HDF5 side is in tokens.cpp.
#include "data/tokens.h"
#include "util/error.h"

namespace ropelab::data {

static_assert(
    std::is_same_v<std::variant_alternative_t<static_cast<size_t>(DataKind::kGlue),
                                              decltype(TokenDataset::seqs)>,
                   GlueSplit> &&
        std::is_same_v<std::variant_alternative_t<static_cast<size_t>(DataKind::kSynthetic),
                                                  decltype(TokenDataset::seqs)>,
                       SyntheticSplit>,
    "TokenDataset::seqs lists the kinds in DataKind's order");

void TokenDataset::wrong_kind(DataKind wanted) const {
  throw UserError("the '" + split + "' split holds " + config::to_string(kind()) +
                  " data, this needs " + config::to_string(wanted) + " data");
}

const std::vector<float>& TokenDataset::labels() const {
  static const std::vector<float> none;
  return kind() == DataKind::kGlue ? glue().labels : none;
}

std::vector<std::pair<const char*, const Ragged*>> TokenDataset::groups() const {
  switch (kind()) {
    case DataKind::kLm:
      return {};  // lm().text: Documents, which may stay on disk
    case DataKind::kParallel:
      return {{"src", &parallel().src}, {"tgt", &parallel().tgt}};
    case DataKind::kGlue:
      if (glue().ranking()) return {{"a", &glue().a}, {"b", &glue().b}, {"c", &glue().c}};
      return {{"a", &glue().a}, {"b", &glue().b}};
    case DataKind::kSynthetic:
      return {{"tokens", &synthetic().tokens}, {"scored", &synthetic().scored}};
  }
  return {};
}

TokenDataset empty_dataset(DataKind kind) {
  TokenDataset ds;
  switch (kind) {
    case DataKind::kLm:
      ds.seqs = LmSplit{};
      break;
    case DataKind::kParallel:
      ds.seqs = ParallelSplit{};
      break;
    case DataKind::kGlue:
      ds.seqs = GlueSplit{};
      break;
    case DataKind::kSynthetic:
      ds.seqs = SyntheticSplit{};
      break;
  }
  return ds;
}

}  // namespace ropelab::data
