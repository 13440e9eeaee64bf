// Text files as ropelab reads them: strict UTF-8 (RFC 3629: no overlong forms, surrogates or
// code points past U+10FFFF), one line per record, and parallel corpora (WMT plain text, line i
// of the source translates line i of the target). Shared by the corpora, the data pipeline and
// translation scoring.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::text {

// Checks that `s` is valid UTF-8 (strictly: no overlong forms, surrogates or code points past
// U+10FFFF); returns the byte offset of the first bad byte or -1.
int64_t invalid_utf8_at(const std::string& s);
// The lines of a text (a trailing '\r' stripped), each checked to be UTF-8; a bad line is a
// UserError naming `name` and the line number. read_lines reads a file first.
std::vector<std::string> split_lines(const std::string& data, const std::string& name);
std::vector<std::string> read_lines(const std::string& path);

// A parallel corpus: line i of the source translates line i of the target (WMT plain text).
// Both sides are split_lines-checked; different line counts or an empty source are a
// UserError naming the files.
struct ParallelText {
  std::vector<std::string> src, tgt;
};
ParallelText split_parallel(const std::string& src_data, const std::string& src_name,
                            const std::string& tgt_data, const std::string& tgt_name);
ParallelText read_parallel(const std::string& src_path, const std::string& tgt_path);

}  // namespace ropelab::text
