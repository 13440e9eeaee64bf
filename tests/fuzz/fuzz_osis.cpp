// The OSIS reader of diatheke's output (the built-in Bible corpora) on arbitrary bytes: verses
// or a UserError, nothing else. Every verse has a canonical book, chapter and verse numbers
// >= 1 and text on one line with its whitespace collapsed (a '<' may remain: &lt; decodes to
// it).
#include <algorithm>

#include "corpora/corpus.h"
#include "fuzz_util.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in = fuzz::as_string(data, size);
  (void)ropelab::corpora::clean_osis_text(in);
  try {
    const auto& books = ropelab::corpora::canonical_books();
    for (const auto& v : ropelab::corpora::parse_diatheke_osis(in, "fuzz")) {
      if (std::find(books.begin(), books.end(), v.book) == books.end())
        fuzz::violated("a verse of a non-canonical book: " + v.book);
      if (v.chapter < 1 || v.verse < 1) fuzz::violated("a verse numbered below 1: " + v.key());
      if (v.text.find_first_of("\n\r\t") != std::string::npos ||
          v.text.find("  ") != std::string::npos ||
          (!v.text.empty() && (v.text.front() == ' ' || v.text.back() == ' ')))
        fuzz::violated("whitespace not collapsed in " + v.key() + ": '" + v.text + "'");
    }
  } catch (const ropelab::UserError&) {
  }
  return 0;
}
