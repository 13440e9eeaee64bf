// The trainer's evaluator: the validation split, evaluated by the task (tasks/task.h:
// evaluate_split and the task's whole-split metrics), and the best value of the task's selection
// metric so far (which picks the best checkpoint).
#pragma once
#include <memory>
#include <optional>

#include "data/batches.h"
#include "tasks/task.h"
#include "weights/checkpoint.h"

namespace ropelab::train {

class Evaluator {
 public:
  Evaluator(const tasks::Task& task, data::TokenDataset split,
            std::unique_ptr<data::BatchStream> stream, tasks::EvalOptions o);
  // The task's evaluation of the split (every rank); nullopt when a signal stopped it (every
  // rank agrees): a partial evaluation would be a wrong number.
  std::optional<tasks::EvalResult> evaluate(model::ModelImpl& m) const;
  // Records `metrics` of the evaluation at st.step as the best if it beats st's best.
  void track_best(const tasks::Metrics& metrics, weights::TrainState& st) const;

 private:
  const tasks::Task& task_;
  data::TokenDataset split_;
  std::unique_ptr<data::BatchStream> stream_;
  tasks::EvalOptions opts_;
};

}  // namespace ropelab::train
