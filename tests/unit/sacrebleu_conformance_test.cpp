// ropelab's scorers against the real sacreBLEU 2.6.0 on its conformance set
// (tests/data/sacrebleu, made by scripts/golden/sacrebleu_conformance.py): hard segments
// (Unicode punctuation, CJK, accents, emoji, non-breaking spaces, empty lines on either side,
// two references) and a 1,500-segment corpus; every option of `ropelab bleu`; corpus scores,
// sentence scores, signatures (version aside), and the paired bootstrap and approximate
// randomization tests with sacreBLEU's seed. Torch-free: the sanitizer tier runs it too.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "helpers.h"
#include "scoring/metrics.h"
#include "text/lines.h"
#include "util/fs.h"

namespace ropelab::scoring {
namespace {

struct Expected {
  std::string set, option, kind;
  size_t system = 0;
  int64_t segment = -1;
  std::string signature;
  double score = 0, mean = NAN, ci = NAN, p = NAN;
};

std::vector<Expected> load_expected() {
  std::vector<Expected> out;
  std::istringstream in(fs::read_file(test::source_dir() + "/tests/data/sacrebleu/expected.tsv"));
  std::string line;
  auto num = [](const std::string& s) { return s == "-" ? NAN : std::stod(s); };
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, '\t');) f.push_back(c);
    if (f.size() != 10) throw std::runtime_error("expected.tsv: a row without 10 fields: " + line);
    Expected e{f[0], f[1],      f[2],      std::stoul(f[3]), f[4] == "-" ? -1 : std::stol(f[4]),
               f[5], num(f[6]), num(f[7]), num(f[8]),        num(f[9])};
    out.push_back(e);
  }
  return out;
}

// The option ids of the generating script, as ropelab's options.
ScoreOptions options_for(const std::string& id) {
  ScoreOptions o;
  auto has = [&](const char* part) { return id.find(part) != std::string::npos; };
  o.metrics = {id.substr(0, id.find('-'))};
  if (has("chrf++")) o.metrics = {"chrf"}, o.chrf.word_order = 2;
  if (o.metrics[0] == "bleu") {
    o.bleu.lowercase = has("-lc");
    for (const char* tok : {"intl", "zh", "char", "none"})
      if (has(std::string("-").append(tok).c_str())) o.bleu.tokenize = tok;
  }
  if (o.metrics[0] == "chrf") o.chrf.lowercase = has("-lc");
  if (o.metrics[0] == "ter") {
    o.ter.case_sensitive = has("-cs");
    o.ter.normalized = has("-norm");
    o.ter.no_punct = has("-nopunct");
    o.ter.asian_support = has("-asian");
  }
  return o;
}

struct Set {
  std::vector<std::vector<std::string>> systems, refs;
};

Set load_set(const std::string& name) {
  Set s;
  const std::string dir = test::source_dir() + "/tests/data/sacrebleu/";
  for (int k = 0; k < 3; ++k) {
    s.systems.push_back(text::read_lines(dir + name + ".sys" + std::to_string(k) + ".txt"));
    for (auto& line : s.systems.back()) line = text::py_rstrip(line);  // as sacreBLEU reads systems
  }
  for (int r = 0; r < 2; ++r) {
    std::string path = dir + name + ".ref" + std::to_string(r) + ".txt";
    if (std::filesystem::exists(path)) s.refs.push_back(text::read_lines(path));
  }
  return s;
}

TEST(SacrebleuConformance, EveryOptionScoresAndSignsAsSacrebleu) {
  auto expected = load_expected();
  ASSERT_GT(expected.size(), 300u);
  std::map<std::string, Set> sets;
  for (const char* name : {"hard", "long"}) sets[name] = load_set(name);
  ASSERT_EQ(sets["hard"].refs.size(), 2u);
  ASSERT_EQ(sets["long"].systems[0].size(), 1500u);
  // Statistics per (set, option, system), computed once.
  std::map<std::tuple<std::string, std::string, size_t>, SegmentStats> stats;
  size_t checked = 0, paired = 0;
  for (const auto& e : expected) {
    SCOPED_TRACE(e.set + " " + e.option + " " + e.kind + " system " + std::to_string(e.system) +
                 (e.segment >= 0 ? " segment " + std::to_string(e.segment) : ""));
    const Set& set = sets.at(e.set);
    ScoreOptions o = options_for(e.option);
    o.sentence_level = e.kind == "sentence";
    auto m = make_metric(o.metrics[0], o);
    auto stats_of = [&](size_t k) -> const SegmentStats& {
      auto key = std::make_tuple(e.set, e.option, k);
      auto it = stats.find(key);
      if (it == stats.end())
        it = stats.emplace(key, corpus_stats(*m, set.systems[k], set.refs)).first;
      return it->second;
    };
    if (e.kind == "corpus" || e.kind == "sentence") {
      EXPECT_EQ(m->name() + "|" + m->signature(set.refs.size()), e.signature);
      std::vector<double> v;
      if (e.kind == "corpus") {
        v = sum_stats(stats_of(e.system));
      } else {
        std::vector<std::string> refs;
        for (const auto& stream : set.refs) refs.push_back(stream[static_cast<size_t>(e.segment)]);
        v = m->stats(set.systems[e.system][static_cast<size_t>(e.segment)], refs);
      }
      EXPECT_NEAR(m->score(v), e.score, 1e-9);
      ++checked;
      continue;
    }
    // Paired tests: system 0 is the baseline.
    const bool bs = e.kind == "paired-bs";
    const int n = bs ? 1000 : 10000;
    EXPECT_EQ(paired_signature(*m, set.refs.size(), bs ? "bs" : "ar", n, 12345), e.signature);
    ScoreFn score = [&m](const std::vector<double>& v) { return m->score(v); };
    PairedResult r;
    if (e.system == 0)
      r = bs ? bootstrap_baseline(stats_of(0), score, n, 12345) : PairedResult{};
    else if (bs)
      r = paired_bootstrap(stats_of(0), stats_of(e.system), score, n, 12345);
    else
      r = paired_randomization(stats_of(0), stats_of(e.system), score, n, 12345);
    if (e.system > 0) {
      EXPECT_NEAR(r.p_value, e.p, 0.01);  // the bar
      EXPECT_NEAR(r.p_value, e.p, 1e-12) << "the p-value is not sacreBLEU's exactly";
    }
    if (bs) {
      EXPECT_NEAR(r.mean, e.mean, 1e-4);
      EXPECT_NEAR(r.ci, e.ci, 1e-4);
    }
    ++paired;
  }
  EXPECT_GT(checked, 250u);
  EXPECT_GT(paired, 50u);
}

}  // namespace
}  // namespace ropelab::scoring
