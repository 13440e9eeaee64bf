#include "tokenizers/bpe.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "text/unicode.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::tokenizers {

namespace {

using text::unicode::is_letter;
using text::unicode::is_number;
using text::unicode::is_white_space;

// The regexes as tokenizer.json writes them.
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool is_nl(uint32_t c) { return c == '\r' || c == '\n'; }
// [^\s\p{L}\p{N}]
bool is_rest(uint32_t c) { return !is_white_space(c) && !is_letter(c) && !is_number(c); }

// The length of the match of one scanner at `i` (every position matches one alternative).
size_t match_at(const std::vector<uint32_t>& t, size_t i, BpeSplit split) {
  const size_t n = t.size();
  auto run = [&](size_t from, auto pred) {
    while (from < n && pred(t[from])) ++from;
    return from;
  };
  // Contractions: 's 't 're 've 'm 'll 'd (case-insensitive but in GPT-2's).
  if (t[i] == '\'' && i + 1 < n) {
    const bool fold = split != BpeSplit::kGpt2;
    auto is = [&](size_t k, char ch) {
      return k < n && (t[k] == static_cast<uint32_t>(ch) ||
                       (fold && t[k] == static_cast<uint32_t>(ch - 'a' + 'A')));
    };
    if (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd')) return 2;
    if ((is(i + 1, 'r') || is(i + 1, 'v')) && is(i + 2, 'e')) return 3;
    if (is(i + 1, 'l') && is(i + 2, 'l')) return 3;
  }
  if (split == BpeSplit::kGpt2) {
    const size_t j = t[i] == ' ' && i + 1 < n ? i + 1 : i;  // " ?"
    if (is_letter(t[j])) return run(j, is_letter) - i;
    if (is_number(t[j])) return run(j, is_number) - i;
    if (is_rest(t[j])) return run(j, is_rest) - i;
  } else {
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!is_nl(t[i]) && !is_letter(t[i]) && !is_number(t[i]) && i + 1 < n && is_letter(t[i + 1]))
      return run(i + 1, is_letter) - i;
    if (is_letter(t[i])) return run(i, is_letter) - i;
    // \p{N}{1,3} (Qwen2: \p{N})
    if (is_number(t[i])) {
      const size_t most = split == BpeSplit::kLlama3 ? 3 : 1;
      size_t j = i;
      while (j < n && j - i < most && is_number(t[j])) ++j;
      return j - i;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const size_t j = t[i] == ' ' && i + 1 < n && is_rest(t[i + 1]) ? i + 1 : i;
    if (is_rest(t[j])) return run(run(j, is_rest), is_nl) - i;
    // \s*[\r\n]+: the whitespace run up to its last newline
    const size_t end = run(i, is_white_space);
    for (size_t k = end; k > i; --k)
      if (is_nl(t[k - 1])) return k - i;
  }
  // \s+(?!\S): a whitespace run, less its last character unless it ends the text; else \s+.
  const size_t end = run(i, is_white_space);
  if (end == n || end - i == 1) return end - i;
  return end - i - 1;
}

std::vector<std::pair<size_t, size_t>> split_cps(const std::vector<uint32_t>& t, BpeSplit split) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < t.size();) {
    const size_t len = std::max<size_t>(1, match_at(t, i, split));
    out.emplace_back(i, i + len);
    i += len;
  }
  return out;
}

// GPT-2's byte alphabet: printable bytes stand for themselves, the others for 256 + k.
struct ByteAlphabet {
  uint32_t to_cp[256];
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteAlphabet() {
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      to_cp[b] = printable ? b : 256 + extra++;
      to_byte[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& bytes() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

std::vector<std::string> bpe_pre_tokenize(const std::string& text, BpeSplit split) {
  auto cps = text::unicode::decode_utf8(text);
  std::vector<std::string> out;
  for (auto [a, b] : split_cps(cps, split)) out.push_back(text::unicode::encode_utf8(cps, a, b));
  return out;
}

BpeTokenizer::BpeTokenizer(const std::string& path, std::vector<int64_t> order)
    : path_(path), order_(std::move(order)) {
  try {
    load();
  } catch (const nlohmann::json::exception& e) {  // a value of an unexpected type
    throw UserError(path + ": an unexpected structure (" + e.what() + ")");
  }
}

void BpeTokenizer::load() {
  const std::string& path = path_;
  const std::string text = fs::read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": not valid JSON (" + e.what() + ")");
  }
  auto fail = [&](const std::string& key, const std::string& why) {
    throw UserError(path + ": " + key + ": " + why);
  };
  // A copy of j[key] (or of `from`'s), which must be an object.
  auto obj = [&](const nlohmann::json& from, const char* key, const std::string& name) {
    nlohmann::json v = from.is_object() ? from.value(key, nlohmann::json()) : nlohmann::json();
    if (!v.is_object()) fail(name, "expected an object");
    return v;
  };
  if (!j.is_object()) fail("(top level)", "expected an object");
  const nlohmann::json model = obj(j, "model", "model");
  if (model.value("type", std::string()) != "BPE")
    fail("model.type", "a byte-level BPE model (\"BPE\") is expected");
  if (model.value("byte_fallback", false))
    fail("model.byte_fallback", "byte fallback (a SentencePiece-style BPE) is not byte-level BPE");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(k) && !model[k].is_null() && model[k] != "")
      fail(std::string("model.") + k, "not supported");
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"] != 0)
    fail("model.dropout", "BPE dropout is for training");
  ignore_merges_ = model.value("ignore_merges", false);
  // Vocabulary and added tokens.
  const nlohmann::json vocab = obj(model, "vocab", "model.vocab");
  int64_t top = -1;
  for (const auto& [tok, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      fail("model.vocab", "the id of " + tok + " is not a non-negative integer");
    vocab_[tok] = id.get<int32_t>();
    top = std::max<int64_t>(top, id.get<int64_t>());
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") ||
          !a["id"].is_number_integer() || !a["content"].is_string())
        fail("added_tokens", "each needs an integer id and a string content");
      for (const char* k : {"lstrip", "rstrip", "single_word"})
        if (a.value(k, false))
          fail("added_tokens",
               std::string(k) + " (for " + a["content"].get<std::string>() + ") is not supported");
      AddedToken t{a["content"].get<std::string>(), a["id"].get<int32_t>(),
                   a.value("special", false)};
      if (t.content.empty()) fail("added_tokens", "an empty token");
      vocab_[t.content] = t.id;
      top = std::max<int64_t>(top, t.id);
      added_.push_back(t);
    }
  }
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  pieces_.assign(static_cast<size_t>(top + 1), std::string());
  for (const auto& [tok, id] : vocab_) pieces_[static_cast<size_t>(id)] = tok;
  // Merges: "a b" strings, or [a, b] pairs.
  if (!model.contains("merges") || !model["merges"].is_array())
    fail("model.merges", "missing (a list of merges)");
  int32_t rank = 0;
  for (const auto& m : model["merges"]) {
    std::string a, b;
    if (m.is_string()) {
      const auto s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) fail("model.merges", "\"" + s + "\" is not two tokens");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      fail("model.merges", "each merge is \"a b\" or [a, b]");
    }
    ranks_.emplace(a + '\x01' + b, rank++);
  }
  // The normaliser and the pre-tokeniser.
  const nlohmann::json norm = j.value("normalizer", nlohmann::json());
  if (norm.is_object() && norm.value("type", std::string()) == "NFC")
    nfc_ = true;
  else if (!norm.is_null())
    fail("normalizer", norm.dump() + " is not supported (none or NFC)");
  const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
  auto byte_level = [&](const nlohmann::json& p, bool regex) {
    if (!p.is_object() || p.value("type", std::string()) != "ByteLevel") return false;
    if (p.value("add_prefix_space", false))
      fail("pre_tokenizer", "ByteLevel with add_prefix_space is not supported");
    return p.value("use_regex", true) == regex;
  };
  if (byte_level(pre, true)) {
    split_ = BpeSplit::kGpt2;
  } else if (pre.is_object() && pre.value("type", std::string()) == "Sequence" &&
             pre.contains("pretokenizers") && pre["pretokenizers"].size() == 2 &&
             byte_level(pre["pretokenizers"][1], false)) {
    const nlohmann::json s = pre["pretokenizers"][0];
    const nlohmann::json pat = s.value("pattern", nlohmann::json::object());
    const std::string pattern = pat.is_object() ? pat.value("Regex", std::string()) : "";
    if (s.value("type", std::string()) != "Split" ||
        s.value("behavior", std::string()) != "Isolated" || s.value("invert", false))
      fail("pre_tokenizer", "a Split (Isolated) then ByteLevel is expected");
    if (pattern == kLlama3Pattern)
      split_ = BpeSplit::kLlama3;
    else if (pattern == kQwen2Pattern)
      split_ = BpeSplit::kQwen2;
    else if (pattern == kGpt2Pattern)
      split_ = BpeSplit::kGpt2;
    else
      fail("pre_tokenizer", "the split pattern " + pattern +
                                " is not one ropelab runs (Llama 3's, Qwen2's or GPT-2's)");
  } else {
    fail("pre_tokenizer", pre.dump() +
                              " is not supported (byte-level: GPT-2's, or a Split of "
                              "Llama 3's or Qwen2's pattern then ByteLevel)");
  }
  fingerprint_ = "bpe-" + fs::hex64(fs::hash_bytes(text));
  if (!order_.empty()) {
    if (static_cast<int64_t>(order_.size()) < size())
      throw UserError(path + ": has " + std::to_string(size()) +
                      " ids but its vocabulary order lists " + std::to_string(order_.size()));
    to_ropelab_ = invert_order(order_);
    std::string ids;
    for (auto id : order_) ids += std::to_string(id) + ",";
    fingerprint_ += "-order-" + fs::hex64(fs::hash_bytes(ids));
  }
}

int64_t BpeTokenizer::vocab_size() const {
  return order_.empty() ? size() : static_cast<int64_t>(order_.size());
}

int32_t BpeTokenizer::id_of(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
  const auto& alpha = bytes();
  std::vector<std::string> sym;
  std::string whole;
  for (unsigned char b : piece) {
    std::string s = text::unicode::encode_utf8({alpha.to_cp[b]});
    whole += s;
    sym.push_back(std::move(s));
  }
  auto id = [&](const std::string& s) {
    auto it = vocab_.find(s);
    if (it == vocab_.end())
      throw UserError(path_ + ": the vocabulary lacks \"" + s + "\", which its merges make");
    return it->second;
  };
  if (ignore_merges_ && vocab_.count(whole) != 0) {
    out.push_back(id(whole));
    return;
  }
  while (sym.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = ranks_.find(sym[i] + '\x01' + sym[i + 1]);
      if (it != ranks_.end() && it->second < best) best = it->second, at = i;
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (const auto& s : sym) out.push_back(id(s));
}

std::vector<int32_t> BpeTokenizer::encode_original(const std::string& text) const {
  std::vector<int32_t> ids;
  auto plain = [&](size_t from, size_t to) {
    if (to <= from) return;
    auto cps = text::unicode::decode_utf8(text.substr(from, to - from));
    if (nfc_) cps = text::unicode::nfc(cps);
    for (auto [a, b] : split_cps(cps, split_))
      encode_piece(text::unicode::encode_utf8(cps, a, b), ids);
  };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const auto& t : added_)
      if (text.compare(i, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    plain(start, i);
    ids.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  plain(start, text.size());
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  auto ids = encode_original(text);
  if (!order_.empty())
    for (auto& id : ids) id = to_ropelab_[static_cast<size_t>(id)];
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  const auto& alpha = bytes();
  std::string out;
  for (int32_t r : ids) {
    if (r < 0 || r >= vocab_size()) continue;
    if (!order_.empty() && r < Special::kCount) continue;  // ropelab's specials
    const int64_t id = order_.empty() ? r : order_[static_cast<size_t>(r)];
    if (id >= size()) continue;  // a padding row
    const std::string& p = pieces_[static_cast<size_t>(id)];
    auto added =
        std::find_if(added_.begin(), added_.end(), [&](const AddedToken& t) { return t.id == id; });
    if (added != added_.end()) {  // written as is; special ones dropped
      if (!added->special) out += added->content;
      continue;
    }
    for (uint32_t c : text::unicode::decode_utf8(p)) {
      auto it = alpha.to_byte.find(c);
      if (it != alpha.to_byte.end()) out += static_cast<char>(it->second);
    }
  }
  return text::unicode::encode_utf8(text::unicode::decode_utf8(out));  // invalid bytes -> U+FFFD
}

std::string BpeTokenizer::piece(int32_t r) const {
  if (r < 0 || r >= vocab_size()) return "<invalid>";
  const int64_t id = order_.empty() ? r : order_[static_cast<size_t>(r)];
  return id < size() ? pieces_[static_cast<size_t>(id)] : "<unused>";
}

}  // namespace ropelab::tokenizers
