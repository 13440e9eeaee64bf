#include "tasks/task.h"

#include <cstring>

#include "dist/world.h"
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
  o.rank = dist::world().rank();
  o.world = dist::world().size();
  return o;
}

Sums over_ranks(const Sums& s, const char* what) {
  const auto& w = dist::world();
  if (!w.distributed()) return s;
  std::string bytes;
  for (const auto& [k, v] : s.v) {
    auto n = static_cast<uint32_t>(k.size());
    bytes.append(reinterpret_cast<const char*>(&n), sizeof n).append(k);
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  Sums out;
  for (const auto& b : w.gather(bytes, what)) {
    for (size_t p = 0; p + sizeof(uint32_t) <= b.size();) {
      uint32_t n = 0;
      double v = 0;
      std::memcpy(&n, b.data() + p, sizeof n);
      std::string k = b.substr(p + sizeof n, n);
      std::memcpy(&v, b.data() + p + sizeof n + n, sizeof v);
      out.v[k] += v;
      p += sizeof n + n + sizeof v;
    }
  }
  return out;
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
  total = over_ranks(total, "summing the evaluation");
  EvalResult r;
  r.metrics = metrics(total);
  r.tokens = total("tokens");
  return r;
}

}  // namespace ropelab::tasks
