// The one place that maps a task config to its Task, and the one place a task's setup is read
// from the whole config (each task keeps only the sections in TaskSetup). A new task adds one
// case here.
#include "corpora/builtin.h"
#include "tasks/glue.h"
#include "tasks/lm.h"
#include "tasks/rank.h"
#include "tasks/translation.h"

namespace ropelab::tasks {

namespace {
struct Make {
  const TaskSetup& s;
  std::unique_ptr<Task> operator()(const config::ClmTaskConfig&) const {
    return std::make_unique<CausalLmTask>(s);
  }
  std::unique_ptr<Task> operator()(const config::MlmTaskConfig& t) const {
    return std::make_unique<MaskedLmTask>(s, t);
  }
  std::unique_ptr<Task> operator()(const config::TranslationTaskConfig& t) const {
    return std::make_unique<TranslationTask>(s, t);
  }
  std::unique_ptr<Task> operator()(const config::GlueTaskConfig&) const {
    return std::make_unique<GlueTask>(s);
  }
  std::unique_ptr<Task> operator()(const config::RankTaskConfig&) const {
    return std::make_unique<RankTask>(s);
  }
  std::unique_ptr<Task> operator()(const config::AnswerTaskConfig&) const {
    return std::make_unique<AnswerTask>(s);
  }
};
}  // namespace

TaskSetup task_setup(const config::Config& c, int64_t vocab, const tokenizers::Tokenizer* tok,
                     int64_t source_vocab) {
  TaskSetup s;
  s.model = c.model;
  s.task = c.task;
  s.seed = c.run.seed;
  s.vocab = vocab;
  s.source_vocab = source_vocab;
  s.tokenizer = tok;
  s.byte_tokens = c.data.tokenizer.type == config::TokenizerType::kByte;
  if (config::kind_of(c.data.source) == config::DataKind::kGlue)
    s.glue = corpora::glue_task_of(c.data);
  s.batch_size = c.train.batch_size;
  s.context_parallel = c.train.context_parallel;
  return s;
}

std::unique_ptr<Task> make_task(const config::Config& c, int64_t vocab,
                                const tokenizers::Tokenizer* tok, int64_t source_vocab) {
  return std::visit(Make{task_setup(c, vocab, tok, source_vocab)}, c.task.opts);
}

}  // namespace ropelab::tasks
