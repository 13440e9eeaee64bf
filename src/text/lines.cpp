#include "text/lines.h"

#include "util/error.h"
#include "util/fs.h"

namespace ropelab::text {

int64_t invalid_utf8_at(const std::string& s) {
  size_t i = 0;
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());  // NOLINT
  while (i < s.size()) {
    unsigned char c = u[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k)
      if ((u[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
    const unsigned char c1 = len > 1 ? u[i + 1] : 0;
    if ((len == 2 && c < 0xC2) ||                               // overlong
        (len == 3 && c == 0xE0 && c1 < 0xA0) ||                 // overlong
        (len == 3 && c == 0xED && c1 >= 0xA0) ||                // a surrogate (U+D800-U+DFFF)
        (len == 4 && c == 0xF0 && c1 < 0x90) ||                 // overlong
        (len == 4 && (c > 0xF4 || (c == 0xF4 && c1 >= 0x90))))  // beyond U+10FFFF
      return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

std::vector<std::string> split_lines(const std::string& data, const std::string& name) {
  std::vector<std::string> lines;
  size_t start = 0;
  int64_t no = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    std::string line = data.substr(start, end - start);
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    int64_t bad = invalid_utf8_at(line);
    if (bad >= 0)
      throw UserError(name + ":" + std::to_string(no) + ": invalid UTF-8 at byte " +
                      std::to_string(bad + 1) + " of the line");
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> read_lines(const std::string& path) {
  return split_lines(fs::read_file(path), path);
}

ParallelText split_parallel(const std::string& src_data, const std::string& src_name,
                            const std::string& tgt_data, const std::string& tgt_name) {
  ParallelText p{split_lines(src_data, src_name), split_lines(tgt_data, tgt_name)};
  if (p.src.size() != p.tgt.size())
    throw UserError(tgt_name + ": has " + std::to_string(p.tgt.size()) + " lines but " + src_name +
                    " has " + std::to_string(p.src.size()) + " (files must align)");
  if (p.src.empty()) throw UserError(src_name + ": no text (the file is empty)");
  return p;
}

ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path) {
  return split_parallel(fs::read_file(src_path), src_path, fs::read_file(tgt_path), tgt_path);
}

}  // namespace ropelab::text
