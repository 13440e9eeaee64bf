// Paired significance tests between translation runs on their test-split translations
// (predictions/SPLIT/translations.txt and references.txt, written by `ropelab eval`), with
// sacreBLEU's paired bootstrap resampling and approximate randomization (scoring/metrics.h).
// `compare` runs them with the first run as the baseline; `ablate` pools each variant's seeds
// (the same seed of two variants is one pair of translations of the whole test set, so the
// pooled corpus pairs segment by segment).
#pragma once
#include <string>
#include <vector>

namespace ropelab::lab {

struct PairedSystem {
  std::string name;
  std::vector<std::string> runs;  // run directories, in pairing order (by seed)
};

// A Markdown section: "" when fewer than two systems were given or none has translations of
// `split`. Systems without translations, or whose references differ from the baseline's, are
// left out with a note saying why.
std::string translation_tests(const std::vector<PairedSystem>& systems,
                              const std::string& split = "test");

}  // namespace ropelab::lab
