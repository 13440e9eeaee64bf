#include "corpora/corpus.h"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <set>
#include <sstream>

#include "util/error.h"
#include "util/fs.h"

namespace ropelab::corpora {

const std::vector<std::string>& canonical_books() {
  static const std::vector<std::string> kBooks = {"Genesis",
                                                  "Exodus",
                                                  "Leviticus",
                                                  "Numbers",
                                                  "Deuteronomy",
                                                  "Joshua",
                                                  "Judges",
                                                  "Ruth",
                                                  "I Samuel",
                                                  "II Samuel",
                                                  "I Kings",
                                                  "II Kings",
                                                  "I Chronicles",
                                                  "II Chronicles",
                                                  "Ezra",
                                                  "Nehemiah",
                                                  "Esther",
                                                  "Job",
                                                  "Psalms",
                                                  "Proverbs",
                                                  "Ecclesiastes",
                                                  "Song of Solomon",
                                                  "Isaiah",
                                                  "Jeremiah",
                                                  "Lamentations",
                                                  "Ezekiel",
                                                  "Daniel",
                                                  "Hosea",
                                                  "Joel",
                                                  "Amos",
                                                  "Obadiah",
                                                  "Jonah",
                                                  "Micah",
                                                  "Nahum",
                                                  "Habakkuk",
                                                  "Zephaniah",
                                                  "Haggai",
                                                  "Zechariah",
                                                  "Malachi",
                                                  "Matthew",
                                                  "Mark",
                                                  "Luke",
                                                  "John",
                                                  "Acts",
                                                  "Romans",
                                                  "I Corinthians",
                                                  "II Corinthians",
                                                  "Galatians",
                                                  "Ephesians",
                                                  "Philippians",
                                                  "Colossians",
                                                  "I Thessalonians",
                                                  "II Thessalonians",
                                                  "I Timothy",
                                                  "II Timothy",
                                                  "Titus",
                                                  "Philemon",
                                                  "Hebrews",
                                                  "James",
                                                  "I Peter",
                                                  "II Peter",
                                                  "I John",
                                                  "II John",
                                                  "III John",
                                                  "Jude",
                                                  "Revelation of John"};
  return kBooks;
}

std::string split_of_book(const std::string& book) {
  // ~6% of verses each, mixing narrative, prophecy, letters and apocalyptic text.
  static const std::set<std::string> kValid = {"Ruth", "Ezra",    "Daniel",
                                               "Mark", "Hebrews", "James"};
  static const std::set<std::string> kTest = {"Judges", "Esther", "Micah", "Romans",
                                              "Revelation of John"};
  if (kValid.count(book) != 0) return "valid";
  if (kTest.count(book) != 0) return "test";
  return "train";
}

namespace {

// Every book name diatheke may print (the canon plus WEB's deuterocanon), so that a key of a
// book we drop still ends the verse before it.
const std::vector<std::string>& all_book_names() {
  static const std::vector<std::string> kAll = [] {
    std::vector<std::string> v = canonical_books();
    for (const char* b : {"Tobit", "Judith", "Wisdom", "Sirach", "Baruch", "Prayer of Azariah",
                          "Susanna", "Bel and the Dragon", "I Maccabees", "II Maccabees",
                          "I Esdras", "Prayer of Manasses", "Additional Psalm", "III Maccabees",
                          "II Esdras", "IV Maccabees", "Esther (Greek)", "Letter of Jeremiah"})
      v.emplace_back(b);
    // Longest first, so "I John" is not taken for "John".
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    return v;
  }();
  return kAll;
}

struct KeyHit {
  size_t begin = 0, end = 0;  // [begin, end) covers "Book C:V: "
  std::string book;
  int chapter = 0, verse = 0;
};

bool is_ascii_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// Finds the next "Book C:V:" key at or after `from`.
bool find_key(const std::string& s, size_t from, KeyHit* hit) {
  for (size_t colon = s.find(':', from); colon != std::string::npos;
       colon = s.find(':', colon + 1)) {
    // Expect "<digits>:<digits>:" with this colon being the first.
    size_t c0 = colon;
    while (c0 > 0 && is_ascii_digit(s[c0 - 1])) --c0;
    if (c0 == colon || c0 == 0 || s[c0 - 1] != ' ') continue;
    size_t v1 = colon + 1;
    while (v1 < s.size() && is_ascii_digit(s[v1])) ++v1;
    if (v1 == colon + 1 || v1 >= s.size() || s[v1] != ':') continue;
    // No book has 1000 chapters or verses: a longer number is text, not a key (and would
    // overflow std::stoi; found by fuzzing, tests/fuzz/fuzz_osis.cpp).
    if (colon - c0 > 3 || v1 - colon - 1 > 3) continue;
    size_t name_end = c0 - 1;  // the space before the chapter
    for (const auto& name : all_book_names()) {
      if (name.size() > name_end) continue;
      size_t nb = name_end - name.size();
      if (s.compare(nb, name.size(), name) != 0) continue;
      if (nb > 0 && !std::isspace(static_cast<unsigned char>(s[nb - 1])) && s[nb - 1] != '>')
        continue;
      hit->begin = nb;
      hit->end = v1 + 1 < s.size() && s[v1 + 1] == ' ' ? v1 + 2 : v1 + 1;
      hit->book = name;
      hit->chapter = std::stoi(s.substr(c0, colon - c0));
      hit->verse = std::stoi(s.substr(colon + 1, v1 - colon - 1));
      return true;
    }
  }
  return false;
}

}  // namespace

std::string clean_osis_text(const std::string& in) {
  std::string s;
  s.reserve(in.size());
  // 1. Remove <title>...</title> and <note>...</note> with their contents; other tags become
  //    nothing, except that a tag between two word tags ("</w><w>") is a word boundary.
  size_t i = 0;
  while (i < in.size()) {
    if (in[i] != '<') {
      s.push_back(in[i++]);
      continue;
    }
    size_t close = in.find('>', i);
    if (close == std::string::npos) break;  // a broken tag: drop the rest
    std::string tag = in.substr(i, close - i + 1);
    auto starts = [&](const char* p) { return tag.rfind(p, 0) == 0; };
    if ((starts("<title") || starts("<note")) && tag[tag.size() - 2] != '/') {
      std::string end_tag = starts("<title") ? "</title>" : "</note>";
      size_t e = in.find(end_tag, close);
      i = e == std::string::npos ? in.size() : e + end_tag.size();
      continue;
    }
    if (starts("</w") && close + 2 < in.size() && in.compare(close + 1, 2, "<w") == 0)
      s.push_back(' ');
    if (starts("<milestone") || starts("<l ") || starts("<lg") || starts("<br")) s.push_back(' ');
    i = close + 1;
  }
  // 2. Entities.
  static const std::array<std::pair<const char*, const char*>, 5> kEnt = {
      {{"&quot;", "\""}, {"&apos;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}}};
  for (const auto& [from, to] : kEnt) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + 1))
      s.replace(p, std::char_traits<char>::length(from), to);
  }
  // 3. KJV's paragraph marks are typesetting, not text.
  for (size_t p = s.find("\xC2\xB6"); p != std::string::npos; p = s.find("\xC2\xB6", p))
    s.replace(p, 2, " ");
  // 4. Whitespace: collapse runs, trim, and no space before , ; : . ! ?
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (space) {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
      continue;
    }
    if ((c == ',' || c == ';' || c == ':' || c == '.' || c == '!' || c == '?') && !out.empty() &&
        out.back() == ' ')
      out.pop_back();
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::vector<Verse> parse_diatheke_osis(const std::string& output, const std::string& origin) {
  std::vector<Verse> verses;
  std::set<std::string> canon(canonical_books().begin(), canonical_books().end());
  KeyHit cur, next;
  bool have = find_key(output, 0, &cur);
  while (have) {
    bool more = find_key(output, cur.end, &next);
    size_t text_end = more ? next.begin : output.size();
    // Text before the next key on its own line is a heading of the next verse (psalm titles,
    // acrostic letters): cut the verse at the last newline before the next key when a
    // heading sits there.
    std::string raw = output.substr(cur.end, text_end - cur.end);
    if (more) {
      size_t nl = raw.rfind('\n');
      if (nl != std::string::npos && !clean_osis_text(raw.substr(nl + 1)).empty()) raw.resize(nl);
    } else {
      size_t paren = raw.rfind("\n(");  // diatheke ends with "(module name)"
      if (paren != std::string::npos) raw.resize(paren);
    }
    std::string text = clean_osis_text(raw);
    // Chapter or verse 0 is SWORD's slot for book and chapter introductions, not a verse
    // (found by fuzzing: tests/fuzz/fuzz_osis.cpp).
    if (canon.count(cur.book) != 0 && cur.chapter >= 1 && cur.verse >= 1 && !text.empty())
      verses.push_back(Verse{cur.book, cur.chapter, cur.verse, std::move(text)});
    cur = next;
    have = more;
  }
  if (verses.empty()) throw UserError(origin + ": no verses found in diatheke output");
  return verses;
}

std::vector<Verse> export_bible(const std::string& module) {
  std::string cmd = "diatheke -b " + module + " -f OSIS -k 'Genesis 1:1 - Revelation 22:21' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) throw UserError("diatheke: cannot start it (" + cmd + ")");
  std::string out;
  std::array<char, 1 << 16> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
    throw UserError(
        "diatheke: not installed; HINT: run `bash scripts/setup.sh` (installs "
        "diatheke and the sword-text-* corpus packages)");
  if (out.size() < 1000)
    throw UserError("diatheke: module " + module + " gave no text (" +
                    out.substr(0, out.find('\n')) +
                    "); HINT: apt-get install sword-text-kjv sword-text-web sword-text-sparv");
  return parse_diatheke_osis(out, "diatheke -b " + module);
}

}  // namespace ropelab::corpora
