#include "lab/translation_tests.h"

#include <filesystem>

#include "scoring/metrics.h"
#include "text/lines.h"
#include "util/fs.h"

namespace ropelab::lab {

namespace stdfs = std::filesystem;

std::string translation_tests(const std::vector<PairedSystem>& systems, const std::string& split) {
  std::vector<std::string> names, notes;
  std::vector<std::vector<std::string>> hyps;
  std::vector<std::string> refs;
  for (const auto& s : systems) {
    std::vector<std::string> h, r;
    std::string missing;
    for (const auto& run : s.runs) {
      auto dir = stdfs::path(run) / "predictions" / split;
      if (!fs::exists((dir / "translations.txt").string()) ||
          !fs::exists((dir / "references.txt").string())) {
        missing = run;
        break;
      }
      auto rh = text::read_lines((dir / "translations.txt").string());
      auto rr = text::read_lines((dir / "references.txt").string());
      if (rh.size() != rr.size()) {
        missing = run + " (its translations and references differ in length)";
        break;
      }
      h.insert(h.end(), rh.begin(), rh.end());
      r.insert(r.end(), rr.begin(), rr.end());
    }
    if (s.runs.empty() || !missing.empty()) {
      notes.push_back("`" + s.name + "`: no " + split + " translations in " + missing +
                      " (`ropelab eval RUN --split " + split + "` writes them)");
      continue;
    }
    if (!names.empty() && r != refs) {
      notes.push_back("`" + s.name + "`: its references differ from the baseline's (another " +
                      "test set, tokenizer or seed list), so it cannot be paired with it");
      continue;
    }
    if (names.empty()) refs = r;
    names.push_back(s.name);
    hyps.push_back(std::move(h));
  }
  if (names.size() + notes.size() < 2 || names.empty()) return "";
  std::string pooled = systems.front().runs.size() > 1
                           ? " Each system pools its " +
                                 std::to_string(systems.front().runs.size()) +
                                 " runs (seeds), paired seed by seed with the baseline's."
                           : "";
  std::string md = "\n## Paired significance on the " + split + " split\n\n";
  if (names.size() >= 2)
    md += std::to_string(refs.size()) + " segments, scored as sacreBLEU." + pooled + " " +
          scoring::paired_table(names, hyps, {refs}, scoring::ScoreOptions{}, true);
  else
    md += "No two runs could be paired.\n";
  for (const auto& n : notes) md += "\n- left out: " + n + "\n";
  return md;
}

}  // namespace ropelab::lab
