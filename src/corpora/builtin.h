// The built-in corpora, made from public-domain Bibles that Debian ships as SWORD modules
// (exported with diatheke, see corpus.h). Verse keys align the translations, which gives:
//   bible-en     KJV + WEB English, one chapter per document (language modelling);
//   bible-en-books  the same text, one book per document (long documents: the test split's
//                are Judges, Esther, Micah, Romans and Revelation in both translations, 3.6k
//                to 23.4k tokens each with the 8k BPE); its SentencePiece model learns from
//                the chapters, as bible-en's does;
//   bible-en-es  WEB English / Reina-Valera 1909 Spanish verse pairs (translation);
//   bible-mrpc   MRPC layout: is (KJV verse, WEB verse) a paraphrase? The negatives pair a KJV
//                verse with the WEB of a verse 1-3 away in the same chapter (same topic);
//   bible-sst2   SST-2 layout: is a verse archaic (KJV, 1) or modern (WEB, 0)?
//   bible-cola   CoLA layout: is a WEB verse in its original word order (1), or locally
//                reordered (0: two adjacent words swapped, or a span of 2-3 words moved 1-3
//                words away)? Both classes have the same words, so only word order separates
//                them: a model without positions is at chance (MCC 0).
//   bible-rank   long-text ranking (the paper's §4.5, CAIL2019-SCM form): A is the KJV of a
//                chapter; B and C are its WEB (cut to ranking_words() words) with 10-word
//                segments replaced by the same positions of another book's chapter, 10% of
//                segments in the nearer text and 20% in the farther one (a superset). Is B or
//                C closer to A? The evidence (segments replaced only in the farther text) is
//                spread through the whole text, so a longer window sees more of it. Each
//                triplet appears in both orders: balanced labels, and ties score exactly 50%.
// Splits are by book (split_of_book), so test verses are never near-copies of training ones.
// Per-verse choices come from splitmix64 of the verse key: the corpora are the same everywhere.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/schema.h"
#include "corpora/glue.h"

namespace ropelab::corpora {

// bible-en-books also writes its train split one chapter per line under this name: the text its
// SentencePiece model learns from, so that it gets bible-en's vocabulary.
inline constexpr const char* kChapterText = "train-chapters.txt";

// Exports a built-in corpus as text files under `dir` (skipped when up to date): train/valid/
// test .txt (bible-en), .en/.es (bible-en-es), or a GLUE task directory (bible-mrpc/-sst2).
void export_builtin_text(config::DataSource src, const std::string& dir);

// The GLUE task a built-in GLUE-style source uses ("MRPC", "SST-2", "CoLA"); "" for the others.
std::string builtin_glue_task(config::DataSource source);
// The GLUE task name of a data config: the built-in source's, else data.glue_task ("" for a
// described layout and for bible-rank).
std::string glue_task_name(const config::DataConfig& d);
// The task (name, labels, layout) of a GLUE-kind data config: a GLUE task, bible-rank's
// ranking layout, or the layout data.tsv describes.
GlueTask glue_task_of(const config::DataConfig& d);
// bible-rank: A, B and C are cut to this many words.
constexpr size_t ranking_words() { return 200; }

// bible-cola's perturbation of a verse's words, chosen by `h`: two adjacent words swapped, or a
// span of 2-3 words moved 1-3 words away. The result may equal the input (repeated words).
std::vector<std::string> local_reorder(std::vector<std::string> words, uint64_t h);

}  // namespace ropelab::corpora
