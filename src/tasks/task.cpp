#include "tasks/task.h"

#include "util/device.h"
#include "util/signals.h"

namespace ropelab::tasks {

data::StreamOptions stream_options(const config::Config& c, bool train, int64_t seq_len,
                                   int64_t batch_size) {
  data::StreamOptions o;
  o.seed = static_cast<uint64_t>(c.run.seed);
  o.batch_size = batch_size;
  o.seq_len = seq_len;
  o.shuffle = train;
  return o;
}

EvalResult Task::evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                          const data::BatchStream& s, const EvalOptions& o) const {
  (void)ds;
  bool was_training = m.is_training();
  m.eval();
  torch::NoGradGuard ng;
  Sums total;
  int64_t n = s.batches_per_epoch();
  if (o.max_batches > 0) n = std::min(n, o.max_batches);
  for (int64_t i = 0; i < n && !signals::stop_requested(); ++i) {
    auto b = s.batch(0, i).to(o.device);
    device::Autocast ac(o.device, o.bf16);
    total.add(forward(m, b).sums);
  }
  if (was_training) m.train();
  EvalResult r;
  r.metrics = metrics(total);
  r.tokens = total("tokens");
  return r;
}

}  // namespace ropelab::tasks
