// Built-in corpora from public-domain Bible translations (Debian's SWORD modules):
// King James (engKJV2006eb), World English Bible (engWEB2015eb), Reina-Valera 1909
// (spaRV1909eb), exported verse by verse with `diatheke` and cleaned.
//
// Why OSIS and not diatheke's "plain" output: plain drops the markup between adjacent word
// tags, gluing words ("Godcreated"); OSIS keeps <w>God</w><w>created</w>, so the word boundary
// is recovered exactly. Headings (psalm titles, acrostic letters) are dropped; verses of books
// outside the 66-book canon (WEB's deuterocanon) are dropped so all translations align.
//
// Splits are by book (fixed lists below), so test verses are never near-copies of training
// verses from the same chapter.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::corpora {

struct Verse {
  std::string book;
  int chapter = 0;
  int verse = 0;
  std::string text;
  std::string key() const {
    return book + " " + std::to_string(chapter) + ":" + std::to_string(verse);
  }
};

// The 66 canonical books in order, as diatheke names them.
const std::vector<std::string>& canonical_books();
// "train", "valid" or "test" for a canonical book.
std::string split_of_book(const std::string& book);

// Parses diatheke OSIS output (`diatheke -b MOD -f OSIS -k ...`). Throws UserError naming
// `origin` when nothing parses.
std::vector<Verse> parse_diatheke_osis(const std::string& output, const std::string& origin);
// Strips OSIS/XML markup from one stretch of text, turning </w><w> joins into spaces,
// decoding entities and collapsing whitespace.
std::string clean_osis_text(const std::string& in);

// Runs diatheke for a SWORD module and parses it. UserError with an install hint if missing.
std::vector<Verse> export_bible(const std::string& module);

// The built-in translations: module names.
inline constexpr const char* kKJV = "engKJV2006eb";
inline constexpr const char* kWEB = "engWEB2015eb";
inline constexpr const char* kRV = "spaRV1909eb";

}  // namespace ropelab::corpora
