#include "train/evaluator.h"

#include "dist/world.h"
#include "util/signals.h"

namespace ropelab::train {

Evaluator::Evaluator(const tasks::Task& task, data::TokenDataset split,
                     std::unique_ptr<data::BatchStream> stream, tasks::EvalOptions o)
    : task_(task), split_(std::move(split)), stream_(std::move(stream)), opts_(o) {}

std::optional<tasks::EvalResult> Evaluator::evaluate(model::ModelImpl& m) const {
  auto out = task_.evaluate(m, split_, *stream_, opts_);
  if (dist::world().sum({signals::stop_requested() ? 1.0 : 0.0}, "agreeing on a stop")[0] > 0)
    return std::nullopt;
  return out;
}

void Evaluator::track_best(const tasks::Metrics& metrics, weights::TrainState& st) const {
  auto sel = task_.selection();
  auto it = metrics.find(sel.metric);
  if (it == metrics.end()) return;
  double v = it->second;
  if (st.best_step < 0 || (sel.higher_is_better ? v > st.best_valid : v < st.best_valid)) {
    st.best_valid = v;
    st.best_step = st.step;
  }
}

}  // namespace ropelab::train
