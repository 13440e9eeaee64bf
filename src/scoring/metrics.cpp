#include "scoring/metrics.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "text/lines.h"
#include "util/error.h"

namespace ropelab::scoring {

namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

class BleuMetric : public Metric {
 public:
  explicit BleuMetric(BleuOptions o) : o_(std::move(o)) {}
  std::string name() const override { return "BLEU"; }
  std::string signature(size_t nrefs) const override { return bleu_signature(nrefs, o_); }
  std::vector<double> stats(const std::string& hyp,
                            const std::vector<std::string>& refs) const override {
    auto s = bleu_stats(hyp, refs, o_);
    std::vector<double> v(s.correct.begin(), s.correct.end());
    v.insert(v.end(), s.total.begin(), s.total.end());
    v.push_back(s.hyp_len);
    v.push_back(s.ref_len);
    return v;
  }
  double score(const std::vector<double>& v) const override { return bleu(v).score; }
  std::string describe(const std::vector<double>& v) const override {
    return bleu(v).line().substr(7);  // after "BLEU = "
  }

 private:
  BleuOptions o_;
  Bleu bleu(const std::vector<double>& v) const {
    BleuStats s;
    std::copy(v.begin(), v.begin() + 4, s.correct.begin());
    std::copy(v.begin() + 4, v.begin() + 8, s.total.begin());
    // sacreBLEU takes int() of the lengths (float sums in its resampling).
    s.hyp_len = static_cast<double>(static_cast<int64_t>(v[8]));
    s.ref_len = static_cast<double>(static_cast<int64_t>(v[9]));
    return bleu_from(s, o_.effective_order);
  }
};

class ChrfMetric : public Metric {
 public:
  explicit ChrfMetric(ChrfOptions o) : o_(o) {}
  std::string name() const override { return chrf_name(o_); }
  std::string signature(size_t nrefs) const override { return chrf_signature(nrefs, o_); }
  std::vector<double> stats(const std::string& hyp,
                            const std::vector<std::string>& refs) const override {
    return chrf_stats(hyp, refs, o_).v;
  }
  double score(const std::vector<double>& v) const override { return chrf_from({v}); }

 private:
  ChrfOptions o_;
};

class TerMetric : public Metric {
 public:
  explicit TerMetric(TerOptions o) : o_(o) {}
  std::string name() const override { return "TER"; }
  std::string signature(size_t nrefs) const override { return ter_signature(nrefs, o_); }
  std::vector<double> stats(const std::string& hyp,
                            const std::vector<std::string>& refs) const override {
    return ter_stats(hyp, refs, o_);
  }
  double score(const std::vector<double>& v) const override { return ter_from(v); }

 private:
  TerOptions o_;
};

// "nrefs:N|..." with the test's fields after nrefs, where sacreBLEU's signatures put them.
std::string with_fields(const std::string& sig, const std::string& fields) {
  auto at = sig.find('|');
  return sig.substr(0, at) + fields + sig.substr(at);
}

// A table as aligned text (first column right-aligned, the rest centred, as sacreBLEU's) or as
// Markdown.
std::string render(const std::vector<std::vector<std::string>>& rows, bool md) {
  std::vector<size_t> width(rows.at(0).size(), 0);
  auto len = [](const std::string& s) { return text::code_points(s).size(); };
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], len(r[c]));
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (md) {
      out += "|";
      for (const auto& cell : r) out += " " + cell + " |";
      out += "\n";
      if (i == 0) {
        out += "|--:|";
        for (size_t c = 1; c < r.size(); ++c) out += ":-:|";
        out += "\n";
      }
      continue;
    }
    for (size_t c = 0; c < r.size(); ++c) {
      size_t pad = width[c] - len(r[c]);
      if (c == 0)
        out += std::string(pad, ' ') + r[c];
      else
        out += "  " + std::string(pad / 2, ' ') + r[c] + std::string(pad - pad / 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
    if (i == 0) {
      size_t total = 0;
      for (size_t c = 0; c < width.size(); ++c) total += width[c] + (c ? 2 : 0);
      out += std::string(total, '-') + "\n";
    }
  }
  return out;
}

std::vector<std::vector<std::string>> load_refs(const std::vector<std::string>& ref_paths,
                                                const std::string& hyp_path, size_t lines) {
  std::vector<std::vector<std::string>> refs;
  for (const auto& p : ref_paths) {
    refs.push_back(text::read_lines(p));
    if (refs.back().size() != lines)
      throw UserError(p + ": has " + std::to_string(refs.back().size()) + " lines but " + hyp_path +
                      " has " + std::to_string(lines) +
                      " (one segment per line; the files must align)");
  }
  return refs;
}

}  // namespace

std::string Metric::describe(const std::vector<double>& summed) const {
  return fixed(score(summed), 2);
}

void check_score_options(const ScoreOptions& o) {
  if (o.metrics.empty()) throw UserError("--metrics: name at least one of bleu, chrf, ter");
  std::set<std::string> seen;
  for (const auto& m : o.metrics) {
    (void)make_metric(m, o);  // a UserError naming an unknown metric
    if (!seen.insert(m).second) throw UserError("--metrics: " + m + " is named twice");
  }
  check_tokenizer(o.bleu.tokenize);
  if (o.chrf.word_order < 0 || o.chrf.word_order > 2)
    throw UserError("--chrf-word-order " + std::to_string(o.chrf.word_order) +
                    ": 0 (chrF), 1 or 2 (chrF++)");
  if (o.paired != "bs" && o.paired != "ar" && o.paired != "both")
    throw UserError("--paired " + o.paired + ": bs, ar or both");
  if (o.paired_bs_n < 1 || o.paired_ar_n < 1)
    throw UserError("--paired-bs-n and --paired-ar-n: at least 1");
}

std::unique_ptr<Metric> make_metric(const std::string& name, const ScoreOptions& o) {
  if (name == "bleu") {
    BleuOptions b = o.bleu;
    b.effective_order = o.sentence_level || b.effective_order;
    return std::make_unique<BleuMetric>(b);
  }
  if (name == "chrf") return std::make_unique<ChrfMetric>(o.chrf);
  if (name == "ter") return std::make_unique<TerMetric>(o.ter);
  throw UserError("--metrics " + name + ": not a metric ropelab has (bleu, chrf, ter)");
}

SegmentStats corpus_stats(const Metric& m, const std::vector<std::string>& hyps,
                          const std::vector<std::vector<std::string>>& refs) {
  SegmentStats out;
  out.reserve(hyps.size());
  for (size_t i = 0; i < hyps.size(); ++i) out.push_back(m.stats(hyps[i], segment_refs(refs, i)));
  return out;
}

std::string paired_signature(const Metric& m, size_t nrefs, const std::string& test, int n,
                             uint64_t seed) {
  return m.name() + "|" +
         with_fields(m.signature(nrefs),
                     "|" + test + ":" + std::to_string(n) + "|seed:" + std::to_string(seed));
}

std::string paired_table(const std::vector<std::string>& names,
                         const std::vector<std::vector<std::string>>& systems,
                         const std::vector<std::vector<std::string>>& refs, const ScoreOptions& o,
                         bool md) {
  check_score_options(o);
  const bool bs = o.paired != "ar", ar = o.paired != "bs";
  std::vector<std::vector<std::string>> rows(systems.size() + 1);
  rows[0].push_back("system");
  for (size_t s = 0; s < systems.size(); ++s)
    rows[s + 1].push_back(s == 0 ? "baseline: " + names[0] : names[s]);
  std::string sigs;
  for (const auto& name : o.metrics) {
    auto m = make_metric(name, o);
    rows[0].push_back(m->name() + (bs ? " (μ ± 95% CI)" : ""));
    rows[0].push_back("Δ");
    if (bs) rows[0].push_back("p (bs)");
    if (ar) rows[0].push_back("p (ar)");
    auto base = corpus_stats(*m, systems[0], refs);
    ScoreFn score = [&m](const std::vector<double>& v) { return m->score(v); };
    auto cell = [&](const PairedResult& r) {
      return fixed(r.score, 2) +
             (r.has_ci ? " (" + fixed(r.mean, 2) + " ± " + fixed(r.ci, 2) + ")" : std::string());
    };
    // A score equal to the baseline's gets sacreBLEU's p = 1 / (n + 1) by construction (no
    // resampled difference exceeds 0); it is not marked, since there is nothing to test.
    auto pcell = [](double p, bool same) {
      return fixed(p, 4) + (same ? " (equal)" : p < 0.05 ? " *" : "");
    };
    PairedResult b;
    if (bs) {
      b = bootstrap_baseline(base, score, o.paired_bs_n, o.seed);
    } else {
      b.score = score(sum_stats(base));
    }
    rows[1].push_back(cell(b));
    rows[1].push_back("");
    if (bs) rows[1].push_back("");
    if (ar) rows[1].push_back("");
    for (size_t s = 1; s < systems.size(); ++s) {
      auto sys = corpus_stats(*m, systems[s], refs);
      PairedResult r;
      if (bs) r = paired_bootstrap(base, sys, score, o.paired_bs_n, o.seed);
      double p_ar = ar ? paired_randomization(base, sys, score, o.paired_ar_n, o.seed).p_value : 0;
      if (!bs) r.score = score(sum_stats(sys));
      rows[s + 1].push_back(cell(r));
      rows[s + 1].push_back((r.score >= b.score ? "+" : "") + fixed(r.score - b.score, 2));
      const bool same = r.score == b.score;
      if (bs) rows[s + 1].push_back(pcell(r.p_value, same));
      if (ar) rows[s + 1].push_back(pcell(p_ar, same));
    }
    if (bs) sigs += paired_signature(*m, refs.size(), "bs", o.paired_bs_n, o.seed) + "\n";
    if (ar) sigs += paired_signature(*m, refs.size(), "ar", o.paired_ar_n, o.seed) + "\n";
  }
  std::string about =
      std::string("Paired tests against the baseline, as sacreBLEU's (seed ") +
      std::to_string(o.seed) + "): " +
      (bs ? "bootstrap resampling with " + std::to_string(o.paired_bs_n) +
                " resamples (score, then the bootstrap mean ± the 95% interval's half-width)"
          : std::string()) +
      (bs && ar ? "; " : "") +
      (ar ? "approximate randomization with " + std::to_string(o.paired_ar_n) + " trials"
          : std::string()) +
      ". p is the chance of a difference at least this large between two systems that are the "
      "same process; * marks p < 0.05, and (equal) a score equal to the baseline's, whose p "
      "(1 / (n + 1), as sacreBLEU computes it) means nothing. Significance says the systems "
      "differ, not which is better.";
  if (md) return about + "\n\n" + render(rows, true) + "\nSignatures:\n\n```\n" + sigs + "```\n";
  return render(rows, false) + "\n" + about + "\n\nSignatures:\n" + sigs;
}

Scored score_files(const std::vector<std::string>& hyp_paths,
                   const std::vector<std::string>& ref_paths, const ScoreOptions& o) {
  check_score_options(o);
  if (ref_paths.empty()) throw UserError("bleu: give at least one --ref file");
  if (hyp_paths.empty()) throw UserError("bleu: give at least one --hyp file");
  if (o.sentence_level && hyp_paths.size() > 1)
    throw UserError(
        "bleu --sentence-level: give one --hyp file (the paired tests compare "
        "systems on corpus scores)");
  std::vector<std::vector<std::string>> systems;
  for (const auto& p : hyp_paths) {
    systems.push_back(text::read_lines(p));
    if (systems.back().empty()) throw UserError(p + ": no segments (the file is empty)");
    // sacreBLEU reads each system's lines right-stripped.
    for (auto& line : systems.back()) line = text::py_rstrip(line);
    if (systems.back().size() != systems[0].size())
      throw UserError(p + ": has " + std::to_string(systems.back().size()) + " lines but " +
                      hyp_paths[0] + " has " + std::to_string(systems[0].size()) +
                      " (one segment per line; the files must align)");
  }
  auto refs = load_refs(ref_paths, hyp_paths[0], systems[0].size());
  Scored out;
  bool bleu = std::find(o.metrics.begin(), o.metrics.end(), "bleu") != o.metrics.end();
  for (size_t s = 0; s < systems.size() && bleu && !o.force; ++s) {
    auto tokenized = std::count_if(systems[s].begin(), systems[s].end(), [](const std::string& h) {
      return h.size() >= 2 && h.compare(h.size() - 2, 2, " .") == 0;
    });
    if (tokenized >= 100)
      out.warnings.push_back(hyp_paths[s] + ": " + std::to_string(tokenized) +
                             " lines end in a tokenized period (' .'): it looks like the text "
                             "was not detokenized, which may hurt the BLEU score (--force: the "
                             "text is detokenized, do not warn)");
  }
  if (systems.size() > 1) {
    out.text = paired_table(hyp_paths, systems, refs, o, false);
    return out;
  }
  std::vector<std::unique_ptr<Metric>> metrics;
  for (const auto& name : o.metrics) metrics.push_back(make_metric(name, o));
  if (o.sentence_level) {
    for (size_t i = 0; i < systems[0].size(); ++i)
      for (const auto& m : metrics)
        out.text += m->name() + "|" + m->signature(refs.size()) + " = " +
                    m->describe(m->stats(systems[0][i], segment_refs(refs, i))) + "\n";
    return out;
  }
  for (const auto& m : metrics)
    out.text += m->name() + "|" + m->signature(refs.size()) + " = " +
                m->describe(sum_stats(corpus_stats(*m, systems[0], refs))) + "\n";
  return out;
}

}  // namespace ropelab::scoring
