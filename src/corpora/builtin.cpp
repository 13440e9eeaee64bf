#include "corpora/builtin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include "corpora/corpus.h"
#include "corpora/glue.h"
#include "util/fs.h"
#include "util/progress.h"
#include "util/random.h"

namespace ropelab::corpora {

namespace {

namespace stdfs = std::filesystem;

// Bump when the corpus cleaning or derivation changes: built-in text is then re-exported.
constexpr int kCorpusVersion = 3;  // 3: bible-rank's evidence spread through the text

const char* kSplits[] = {"train", "valid", "test"};

std::string join_path(const std::string& a, const std::string& b) {
  return (stdfs::path(a) / b).string();
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  fs::write_file_atomic(path, s);
}

using VerseMap = std::map<std::string, Verse>;  // key -> verse

// The verses of `split` joined into one document per chapter (bible-en) or per book
// (bible-en-books: the long documents of sliding-window perplexity and passkey filler).
std::vector<std::string> documents_of(const std::vector<Verse>& verses, const std::string& split,
                                      bool books) {
  std::vector<std::string> docs;
  std::string cur, cur_key;
  for (const auto& v : verses) {
    if (split_of_book(v.book) != split) continue;
    std::string key = books ? v.book : v.book + " " + std::to_string(v.chapter);
    if (key != cur_key && !cur.empty()) docs.push_back(cur), cur.clear();
    cur_key = key;
    cur += (cur.empty() ? "" : " ") + v.text;
  }
  if (!cur.empty()) docs.push_back(cur);
  return docs;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == ' ') {
      if (!cur.empty()) out.push_back(cur), cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string join_words(const std::vector<std::string>& w) {
  std::string s;
  for (const auto& x : w) s += (s.empty() ? "" : " ") + x;
  return s;
}

const GlueTask& ranking_task() {
  static const GlueTask kTask = [] {
    GlueTask t;
    t.name = "bible-rank", t.label_names = {"B", "C"}, t.pair = true;
    t.col_a = "A", t.col_b = "B", t.col_c = "C", t.col_label = "label";
    t.leaderboard_file = t.name + ".tsv";
    return t;
  }();
  return kTask;
}

// bible-rank's triplets (see builtin.h). Per chapter of at least kMinWords words, four
// triplets, each with an intruder chapter of another book of the same split, and each written
// in both orders (B nearer, then C nearer): the labels are exactly balanced, and a model that
// cannot tell B from C (equal scores, as when truncation hides every difference) scores
// exactly 50% on the pair.
void write_ranking(const std::string& dir, const std::vector<std::pair<Verse, Verse>>& pairs) {
  constexpr size_t kMinWords = 100, kSegmentWords = 10, kPerChapter = 4;
  // Segments replaced in the nearer and in the farther text: a segment drawn below kNear is
  // replaced in both, one drawn in [kNear, kFar) only in the farther text (the evidence).
  constexpr double kNear = 0.10, kFar = 0.20;
  struct Chapter {
    std::string book, key;
    int chapter = 0;
    std::vector<std::string> kjv, web;
  };
  std::vector<Chapter> chapters;
  for (const auto& [kjv, web] : pairs) {
    if (chapters.empty() || chapters.back().book != kjv.book ||
        chapters.back().chapter != kjv.chapter) {
      chapters.emplace_back();
      chapters.back().book = kjv.book, chapters.back().chapter = kjv.chapter;
      chapters.back().key = kjv.book + " " + std::to_string(kjv.chapter);
    }
    auto& c = chapters.back();
    for (auto& w : split_words(kjv.text)) c.kjv.push_back(std::move(w));
    for (auto& w : split_words(web.text)) c.web.push_back(std::move(w));
  }
  const GlueTask& task = ranking_task();
  std::string task_dir = join_path(dir, task.name);
  fs::make_dirs(task_dir);
  auto words = [](const std::vector<std::string>& w, size_t n) {
    return join_words(std::vector<std::string>(w.begin(), w.begin() + static_cast<long>(n)));
  };
  for (const char* split : kSplits) {
    std::vector<size_t> in_split;  // the chapters of this split long enough to use
    for (size_t i = 0; i < chapters.size(); ++i)
      if (split_of_book(chapters[i].book) == split && chapters[i].web.size() >= kMinWords &&
          chapters[i].kjv.size() >= kMinWords)
        in_split.push_back(i);
    std::vector<GlueExample> ex;
    for (size_t i : in_split) {
      const Chapter& c = chapters[i];
      const size_t len = std::min(ranking_words(), c.web.size());
      for (uint64_t k = 0; k < kPerChapter; ++k) {
        const uint64_t h = util::mix64(fs::hash_bytes(c.key) ^ util::mix64(k + 1));
        // The intruder: a chapter of another book, so its words rarely occur in A.
        size_t j = (h >> 8) % in_split.size();
        for (size_t tries = 0; chapters[in_split[j]].book == c.book && tries < in_split.size();
             ++tries)
          j = (j + 1) % in_split.size();
        const Chapter& n = chapters[in_split[j]];
        if (n.book == c.book) continue;
        std::vector<std::string> near(c.web.begin(), c.web.begin() + static_cast<long>(len));
        std::vector<std::string> far = near;
        bool evidence = false;
        for (size_t s0 = 0; s0 < len; s0 += kSegmentWords) {
          const double u = static_cast<double>(util::mix64(h ^ util::mix64(s0 + 7)) >> 11) *
                           0x1.0p-53;  // uniform in [0, 1)
          if (u >= kFar) continue;
          for (size_t w = s0; w < std::min(len, s0 + kSegmentWords); ++w) {
            const std::string& other = n.web[w % n.web.size()];
            far[w] = other;
            if (u < kNear) near[w] = other;
          }
          evidence = evidence || u >= kNear;
        }
        if (!evidence) continue;  // the two texts would be equally close
        const std::string a = words(c.kjv, std::min(len, c.kjv.size()));
        const std::string near_s = join_words(near), far_s = join_words(far);
        for (bool c_nearer : {false, true}) {
          GlueExample e;
          e.a = a;
          e.b = c_nearer ? far_s : near_s;
          e.c = c_nearer ? near_s : far_s;
          e.label = c_nearer ? 1.0f : 0.0f;
          ex.push_back(std::move(e));
        }
      }
    }
    std::string name = std::string(split) == "valid" ? "dev" : split;
    fs::write_file_atomic(join_path(task_dir, name + ".tsv"), write_glue_tsv(task, ex, true));
    if (name == "test")
      fs::write_file_atomic(join_path(task_dir, "test_labeled.tsv"),
                            write_glue_tsv(task, ex, true));
  }
}

}  // namespace

GlueTask glue_task_of(const config::DataConfig& d) {
  if (d.source == config::DataSource::kBibleRank) return ranking_task();
  if (!d.tsv.a.empty()) {
    const auto& t = d.tsv;
    GlueTask g;
    g.name = t.name, g.regression = t.regression, g.label_names = t.labels, g.pair = !t.b.empty();
    g.col_a = t.a, g.col_b = t.b, g.col_c = t.c, g.col_label = t.label;
    g.metrics = g.regression                ? GlueMetrics::kCorrelation
                : g.label_names.size() == 2 ? GlueMetrics::kBinary
                                            : GlueMetrics::kAccuracy;
    g.leaderboard_file = g.name + ".tsv";
    return g;
  }
  return glue_task(glue_task_name(d));
}

void export_builtin_text(config::DataSource src, const std::string& dir) {
  const std::string source = config::to_string(src);
  std::string stamp = join_path(dir, "corpus.stamp");
  std::string want = "ropelab corpus v" + std::to_string(kCorpusVersion) + " " + source + "\n";
  if (fs::exists(stamp) && fs::read_file(stamp) == want) return;
  fs::make_dirs(dir);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> modules;
  if (src == config::DataSource::kBibleEn || src == config::DataSource::kBibleMrpc ||
      src == config::DataSource::kBibleSst2 || src == config::DataSource::kBibleCola ||
      src == config::DataSource::kBibleRank || src == config::DataSource::kBibleEnBooks)
    modules = {kKJV, kWEB};
  else
    modules = {kWEB, kRV};
  Progress bar("export " + source, static_cast<int64_t>(modules.size()), "bible");
  std::vector<std::vector<Verse>> bibles;
  for (const auto& m : modules) {
    bibles.push_back(export_bible(m));
    bar.update(static_cast<int64_t>(bibles.size()));
  }
  bar.finish();
  for (size_t i = 0; i < modules.size(); ++i)
    spdlog::info("{}: {} verses", modules[i], bibles[i].size());

  if (config::kind_of(src) == config::DataKind::kLm) {
    for (const char* split : kSplits) {
      std::vector<std::string> docs;
      for (const auto& b : bibles) {
        auto d = documents_of(b, split, src == config::DataSource::kBibleEnBooks);
        docs.insert(docs.end(), d.begin(), d.end());
      }
      write_lines(join_path(dir, std::string(split) + ".txt"), docs);
      if (src != config::DataSource::kBibleEnBooks || std::string(split) != "train") continue;
      std::vector<std::string> chapters;
      for (const auto& b : bibles) {
        auto d = documents_of(b, split, /*books=*/false);
        chapters.insert(chapters.end(), d.begin(), d.end());
      }
      write_lines(join_path(dir, kChapterText), chapters);
    }
  } else {
    // Align the two translations by verse key.
    VerseMap second;
    for (const auto& v : bibles[1]) second[v.key()] = v;
    std::vector<std::pair<Verse, Verse>> pairs;
    for (const auto& v : bibles[0]) {
      auto it = second.find(v.key());
      if (it != second.end()) pairs.emplace_back(v, it->second);
    }
    spdlog::info("{} aligned verse pairs", pairs.size());
    if (src == config::DataSource::kBibleEnEs) {
      for (const char* split : kSplits) {
        std::vector<std::string> en, es;
        for (const auto& [a, b] : pairs)
          if (split_of_book(a.book) == split) en.push_back(a.text), es.push_back(b.text);
        write_lines(join_path(dir, std::string(split) + ".en"), en);
        write_lines(join_path(dir, std::string(split) + ".es"), es);
      }
    } else if (src == config::DataSource::kBibleRank) {
      write_ranking(dir, pairs);
    } else {
      const std::string task_name = builtin_glue_task(src);
      const auto& task = glue_task(task_name);
      std::string task_dir = join_path(dir, task.name);
      fs::make_dirs(task_dir);
      for (const char* split : kSplits) {
        std::vector<GlueExample> ex;
        for (size_t i = 0; i < pairs.size(); ++i) {
          const auto& [kjv, web] = pairs[i];
          if (split_of_book(kjv.book) != split) continue;
          uint64_t h = util::mix64(fs::hash_bytes(kjv.key()));
          GlueExample e;
          if (src == config::DataSource::kBibleMrpc) {
            // Paraphrase (1): KJV and WEB of the same verse. Not (0): WEB of a nearby verse
            // of the same chapter (1-3 verses away), which shares topic and vocabulary.
            e.a = kjv.text;
            if ((h & 1) == 0) {
              e.b = web.text, e.label = 1;
            } else {
              size_t off = 1 + (h >> 8) % 3;
              size_t j = i + off < pairs.size() && pairs[i + off].first.chapter == kjv.chapter &&
                                 pairs[i + off].first.book == kjv.book
                             ? i + off
                             : (i >= off ? i - off : i + 1);
              if (j >= pairs.size() || j == i) continue;
              e.b = pairs[j].second.text, e.label = 0;
            }
          } else if (src == config::DataSource::kBibleCola) {
            // In order (1): the WEB verse as written. Reordered (0): local_reorder of its words,
            // retried with other choices when that changes nothing; verses under 4 words are
            // left out (too short to reorder locally).
            auto words = split_words(web.text);
            if (words.size() < 4) continue;
            e.a = web.text;
            e.label = 1.0f;
            if ((h & 1) != 0) {
              for (uint64_t k = h >> 1, tries = 0; tries < 8; ++tries, k = util::mix64(k)) {
                auto w = local_reorder(words, k);
                if (w == words) continue;
                e.a = join_words(w);
                e.label = 0.0f;
                break;
              }
              if (e.label != 0.0f) continue;
            }
          } else {
            // Archaic (KJV, 1) or modern (WEB, 0) English: one version per verse.
            bool archaic = (h & 1) == 0;
            e.a = archaic ? kjv.text : web.text;
            e.label = archaic ? 1.0f : 0.0f;
          }
          ex.push_back(std::move(e));
        }
        std::string name = std::string(split) == "valid" ? "dev" : split;
        fs::write_file_atomic(join_path(task_dir, name + ".tsv"),
                              write_glue_tsv(task, ex, /*with_labels=*/name != "test"));
        if (name == "test")  // GLUE test files carry no labels; keep ours beside them
          fs::write_file_atomic(join_path(task_dir, "test_labeled.tsv"),
                                write_glue_tsv(task, ex, true));
      }
    }
  }
  fs::write_file_atomic(stamp, want);
  spdlog::info("exported {} text in {:.1f} s", source,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

std::string glue_task_name(const config::DataConfig& d) {
  return config::is_builtin(d.source) ? builtin_glue_task(d.source) : d.glue_task;
}

std::vector<std::string> local_reorder(std::vector<std::string> w, uint64_t h) {
  const size_t n = w.size();
  if (n < 2) return w;
  if ((h & 1) == 0 || n < 4) {
    size_t i = (h >> 1) % (n - 1);
    std::swap(w[i], w[i + 1]);
    return w;
  }
  size_t len = 2 + (h >> 1) % 2;            // span of 2 or 3 words
  size_t start = (h >> 2) % (n - len + 1);  // where it starts
  size_t shift = 1 + (h >> 10) % 3;         // how far it moves
  auto b = w.begin();
  if (start + len + shift <= n)  // to the right
    std::rotate(b + static_cast<std::ptrdiff_t>(start),
                b + static_cast<std::ptrdiff_t>(start + len),
                b + static_cast<std::ptrdiff_t>(start + len + shift));
  else if (start >= shift)  // else to the left
    std::rotate(b + static_cast<std::ptrdiff_t>(start - shift),
                b + static_cast<std::ptrdiff_t>(start),
                b + static_cast<std::ptrdiff_t>(start + len));
  else
    std::swap(w[0], w[1]);
  return w;
}

std::string builtin_glue_task(config::DataSource source) {
  if (source == config::DataSource::kBibleCola) return "CoLA";
  if (source == config::DataSource::kBibleMrpc) return "MRPC";
  if (source == config::DataSource::kBibleSst2) return "SST-2";
  return "";
}

}  // namespace ropelab::corpora
