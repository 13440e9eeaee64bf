#include "tokenizers/wordpiece.h"

#include <algorithm>
#include <filesystem>

#include "text/unicode.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::tokenizers {

namespace {

using text::unicode::decode_utf8;
using text::unicode::encode_utf8;

bool is_control(uint32_t c) {
  return c != '\t' && c != '\n' && c != '\r' && text::unicode::is_other(c);
}
bool is_punct(uint32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
         (c >= 123 && c <= 126) || text::unicode::is_punctuation(c);
}
// The CJK Unified Ideographs blocks, as Hugging Face's BertNormalizer lists them.
bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::vector<uint32_t> normalize_cps(const std::vector<uint32_t>& in, const WordPieceOptions& o) {
  std::vector<uint32_t> a;
  a.reserve(in.size());
  for (uint32_t c : in) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (text::unicode::is_white_space(c)) c = ' ';
    if (is_cjk(c)) {
      a.insert(a.end(), {' ', c, ' '});
    } else {
      a.push_back(c);
    }
  }
  if (o.strip_accents) {
    a = text::unicode::nfd(a);
    a.erase(std::remove_if(a.begin(), a.end(), text::unicode::is_nonspacing_mark), a.end());
  }
  if (o.lowercase) {
    std::vector<uint32_t> l;
    l.reserve(a.size());
    for (uint32_t c : a) text::unicode::append_lower(c, l);
    a = std::move(l);
  }
  return a;
}

// Words of normalised text: split on whitespace; each punctuation character alone.
std::vector<std::string> pre_tokenize_cps(const std::vector<uint32_t>& cps) {
  std::vector<std::string> words;
  size_t start = 0;
  for (size_t i = 0; i <= cps.size(); ++i) {
    const bool end = i == cps.size();
    if (end || text::unicode::is_white_space(cps[i]) || is_punct(cps[i])) {
      if (i > start) words.push_back(encode_utf8(cps, start, i));
      if (!end && is_punct(cps[i])) words.push_back(encode_utf8(cps, i, i + 1));
      start = i + 1;
    }
  }
  return words;
}

constexpr size_t kMaxWordChars = 100;  // transformers' max_input_chars_per_word

}  // namespace

std::string bert_normalize(const std::string& text, const WordPieceOptions& o) {
  return encode_utf8(normalize_cps(decode_utf8(text), o));
}

std::vector<std::string> bert_pre_tokenize(const std::string& normalized) {
  return pre_tokenize_cps(decode_utf8(normalized));
}

std::vector<std::string> read_vocab_txt(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw UserError(path + ": no such file (a WordPiece vocabulary, vocab.txt)");
  std::vector<std::string> tokens;
  const std::string text = fs::read_file(path);
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(std::move(line));
    at = nl + 1;
  }
  if (tokens.empty()) throw UserError(path + ": empty (a WordPiece vocabulary, one token a line)");
  return tokens;
}

std::vector<int64_t> wordpiece_order(const std::vector<std::string>& tokens,
                                     const std::string& path) {
  auto id_of = [&](const char* t) -> int64_t {
    for (size_t i = tokens.size(); i-- > 0;)  // the last line wins, as transformers reads it
      if (tokens[i] == t) return static_cast<int64_t>(i);
    throw UserError(path + ": has no " + t + " token");
  };
  return special_first_order(
      static_cast<int64_t>(tokens.size()),
      {id_of("[PAD]"), id_of("[UNK]"), -1, -1, id_of("[CLS]"), id_of("[SEP]"), id_of("[MASK]")});
}

WordPieceTokenizer::WordPieceTokenizer(const std::string& vocab_path, const WordPieceOptions& o)
    : opt_(o) {
  auto tokens = read_vocab_txt(vocab_path);
  order_ = wordpiece_order(tokens, vocab_path);
  pieces_.resize(order_.size());
  for (size_t r = 0; r < order_.size(); ++r) pieces_[r] = tokens[static_cast<size_t>(order_[r])];
  // A token listed twice: the id of its last line (the vocabulary's order is by line).
  const std::vector<int32_t> ropelab_id = invert_order(order_);
  for (size_t line = 0; line < tokens.size(); ++line) id_[tokens[line]] = ropelab_id[line];
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    specials_.emplace_back(s, id_.at(s));
  fingerprint_ = "wordpiece-" + fs::hex64(fs::hash_bytes(fs::read_file(vocab_path))) +
                 (o.lowercase ? "-lower" : "") + (o.strip_accents ? "-strip" : "");
}

void WordPieceTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  std::vector<size_t> at;  // the byte offset of each character, then the end
  for (size_t i = 0; i < word.size(); ++i)
    if ((static_cast<unsigned char>(word[i]) & 0xC0u) != 0x80u) at.push_back(i);
  at.push_back(word.size());
  const size_t n = at.size() - 1;
  if (n > kMaxWordChars) {
    out.push_back(Special::kUnk);
    return;
  }
  const size_t mark = out.size();
  for (size_t start = 0; start < n;) {
    int32_t found = -1;
    size_t end = n;
    for (; end > start; --end) {
      std::string sub = word.substr(at[start], at[end] - at[start]);
      if (start > 0) sub = "##" + sub;
      auto it = id_.find(sub);
      if (it != id_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // the word cannot be covered: one [UNK] for all of it
      out.resize(mark);
      out.push_back(Special::kUnk);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::vector<int32_t> WordPieceTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  auto encode_plain = [&](size_t from, size_t to) {
    if (to <= from) return;
    for (const auto& w :
         pre_tokenize_cps(normalize_cps(decode_utf8(text.substr(from, to - from)), opt_)))
      encode_word(w, ids);
  };
  size_t plain = 0;
  for (size_t i = text.find('['); i != std::string::npos; i = text.find('[', i + 1)) {
    for (const auto& [s, id] : specials_) {
      if (text.compare(i, s.size(), s) != 0) continue;
      encode_plain(plain, i);
      ids.push_back(id);
      plain = i + s.size();
      i = plain - 1;
      break;
    }
  }
  encode_plain(plain, text.size());
  return ids;
}

std::string WordPieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t id : ids) {
    if (id < Special::kCount || id >= vocab_size()) continue;
    const std::string& p = pieces_[static_cast<size_t>(id)];
    if (p.rfind("##", 0) == 0) {
      s += p.substr(2);
    } else {
      if (!s.empty()) s += ' ';
      s += p;
    }
  }
  return s;
}

std::string WordPieceTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "<invalid>";
  return pieces_[static_cast<size_t>(id)];
}

}  // namespace ropelab::tokenizers
