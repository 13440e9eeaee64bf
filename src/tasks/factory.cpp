// The one place that maps a task config to its Task. A new task adds one case here.
#include "tasks/glue.h"
#include "tasks/lm.h"
#include "tasks/rank.h"
#include "tasks/translation.h"

namespace ropelab::tasks {

namespace {
struct Make {
  const config::Config& c;
  int64_t vocab;
  const text::Tokenizer* tok;
  int64_t source_vocab;
  std::unique_ptr<Task> operator()(const config::ClmTaskConfig&) const {
    return std::make_unique<CausalLmTask>(c, vocab);
  }
  std::unique_ptr<Task> operator()(const config::MlmTaskConfig& t) const {
    return std::make_unique<MaskedLmTask>(c, t, vocab);
  }
  std::unique_ptr<Task> operator()(const config::TranslationTaskConfig& t) const {
    return std::make_unique<TranslationTask>(c, t, vocab, tok, source_vocab);
  }
  std::unique_ptr<Task> operator()(const config::GlueTaskConfig&) const {
    return std::make_unique<GlueTask>(c, vocab);
  }
  std::unique_ptr<Task> operator()(const config::RankTaskConfig&) const {
    return std::make_unique<RankTask>(c, vocab);
  }
  std::unique_ptr<Task> operator()(const config::AnswerTaskConfig&) const {
    return std::make_unique<AnswerTask>(c, vocab);
  }
};
}  // namespace

std::unique_ptr<Task> make_task(const config::Config& c, int64_t vocab, const text::Tokenizer* tok,
                                int64_t source_vocab) {
  return std::visit(Make{c, vocab, tok, source_vocab}, c.task.opts);
}

}  // namespace ropelab::tasks
