#include "eval/translate.h"

#include <spdlog/spdlog.h>

#include "data/prepare.h"
#include "run/run.h"
#include "tasks/translation.h"
#include "util/device.h"
#include "util/error.h"
#include "util/progress.h"
#include "weights/weights.h"

namespace ropelab::eval {

std::vector<std::string> translate_lines(const std::string& source,
                                         const std::vector<std::string>& lines,
                                         const TranslateOptions& o) {
  auto rm =
      run::open_trained(source, run::DataUse::kOpen, o.use_best, {}, [&](const config::Config& c) {
        if (!std::holds_alternative<config::TranslationTaskConfig>(c.task.opts))
          throw UserError(source + ": is not a translation model (task." + c.task.type() +
                          "); `ropelab translate` needs a run trained "
                          "with task.type: translation");
      });
  const auto& c = rm.config;
  const auto& t = std::get<config::TranslationTaskConfig>(c.task.opts);
  const torch::Device dev = rm.device;
  const data::Data& data = *rm.data;
  const auto& task = dynamic_cast<const tasks::TranslationTask&>(*rm.task);
  rm.model->eval();
  auto d = task.decode_options(o.beam > 0 ? o.beam : t.beam);
  if (o.lenpen >= 0) d.lenpen = o.lenpen;
  d.use_cache = o.use_cache;

  std::vector<std::vector<int32_t>> sources;
  sources.reserve(lines.size());
  int64_t cut = 0;
  for (const auto& l : lines) {
    sources.push_back(data.tokenizer().encode(l));
    if (static_cast<int64_t>(sources.back().size()) > c.task.seq_len) ++cut;
  }
  if (cut > 0)
    spdlog::warn("{} source line(s) longer than task.seq_len = {} tokens were cut to it", cut,
                 c.task.seq_len);
  spdlog::info("translating {} lines with {} (beam {}, lenpen {})", lines.size(), rm.checkpoint,
               d.beam, d.lenpen);
  std::unique_ptr<Progress> bar;
  if (o.progress)
    bar = std::make_unique<Progress>("translate", static_cast<int64_t>(lines.size()), "sent");
  auto ids = tasks::translate_ids(*rm.model, sources, d, o.batch_tokens > 0 ? o.batch_tokens : 4096,
                                  c.task.seq_len, dev,
                                  c.train.precision == config::Precision::kBf16, bar.get());
  if (bar) bar->finish();
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const auto& h : ids) out.push_back(data.target_tokenizer().decode({h.begin(), h.end()}));
  return out;
}

}  // namespace ropelab::eval
