// The translation scorers (scoring/metrics.h) on arbitrary bytes, split at the first NUL into a
// hypothesis and a reference segment: every BLEU tokenizer, chrF and chrF++, TER with each
// normalisation. Properties: no crash and no exception; clipped n-gram matches never exceed the
// hypothesis's n-grams; BLEU and chrF within [0, 100]; TER's edits at most the two sides' word
// counts together; valid UTF-8 in gives valid UTF-8 tokens out.
#include <cmath>

#include "fuzz_util.h"
#include "scoring/metrics.h"
#include "text/lines.h"
#include "text/pystr.h"

using namespace ropelab::text;
using namespace ropelab::scoring;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1024) return 0;  // TER's shift search grows fast with length; short is enough
  const std::string in = fuzz::as_string(data, size);
  const size_t cut = in.find('\0');
  const std::string hyp = in.substr(0, cut),
                    ref = cut == std::string::npos ? "" : in.substr(cut + 1);
  const bool valid = invalid_utf8_at(hyp) < 0 && invalid_utf8_at(ref) < 0;
  for (const char* tok : {"13a", "intl", "zh", "char", "none"}) {
    BleuOptions o;
    o.tokenize = tok;
    o.lowercase = size % 2 == 1;
    auto s = bleu_stats(hyp, {ref}, o);
    for (size_t n = 0; n < 4; ++n)
      if (s.correct[n] > s.total[n] || s.correct[n] < 0) fuzz::violated("BLEU matches > n-grams");
    double b = bleu_from(s).score;
    if (!(b >= 0 && b <= 100 + 1e-9)) fuzz::violated("BLEU outside [0, 100]");
    if (valid) {
      std::string t = std::string(tok) == "13a"    ? tokenize_13a(hyp)
                      : std::string(tok) == "intl" ? tokenize_intl(hyp)
                      : std::string(tok) == "zh"   ? tokenize_zh(hyp)
                                                   : hyp;
      if (invalid_utf8_at(t) >= 0) fuzz::violated("a tokenizer broke valid UTF-8");
    }
  }
  for (int word_order : {0, 2}) {
    double c = chrf_from(chrf_stats(hyp, {ref}, ChrfOptions{size % 2 == 0, word_order}));
    if (!(c >= 0 && c <= 100 + 1e-9)) fuzz::violated("chrF outside [0, 100]");
  }
  for (int flags = 0; flags < 4; ++flags) {
    TerOptions o;
    o.normalized = (flags & 1) != 0;
    o.no_punct = (flags & 2) != 0;
    o.asian_support = size % 3 == 0;
    // The hypothesis's words as ter_stats counts them: right-stripped first, as sacreBLEU does
    // (the normalisation's possessive rule splits a final "'s" only at the end of the text).
    auto words = [&](const std::string& s) {
      return py_split(tercom_tokenize(py_rstrip(s), o)).size();
    };
    auto t = ter_stats(hyp, {ref}, o);
    // Any alignment path costs at most one edit per word of either side (the reference is
    // tokenized twice, as sacreBLEU does, so t[1] is its length); more means the beam lost
    // the path and an "infinite" cell leaked out.
    const double both = static_cast<double>(words(hyp)) + t[1];
    if (t[0] < 0 || t[0] > both + 1e-9) fuzz::violated("TER edits beyond both sides' words");
  }
  return 0;
}
