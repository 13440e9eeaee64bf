#include "train/bench.h"

#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>

#include "data/prepare.h"
#include "tasks/task.h"
#include "train/trainer.h"
#include "util/device.h"

namespace ropelab::train {

std::string bench_data(const config::Config& c, int64_t batches, int64_t train_steps) {
  int threads = apply_thread_policy(c.run);
  torch::Device dev = device::resolve(c.run.device);
  data::Data data(c.data, threads, /*prepare=*/true);
  auto ds = data.split("train");
  auto task = tasks::make_task(c, data.vocab_size(), nullptr, data.source_vocab_size());
  auto stream = task->stream(ds, true, c.task.seq_len, c.train.batch_size);
  using clock = std::chrono::steady_clock;

  int64_t per_epoch = stream->batches_per_epoch();
  double data_tokens = 0;
  auto t0 = clock::now();
  for (int64_t i = 0; i < batches; ++i) {
    auto b = stream->batch(i / per_epoch, i % per_epoch);
    data_tokens += static_cast<double>(b.num_tokens);
  }
  double data_s = std::chrono::duration<double>(clock::now() - t0).count();

  torch::manual_seed(0);
  auto model = task->build_model();
  model->to(dev);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-4));
  bool bf16 = c.train.precision == config::Precision::kBf16;
  double train_tokens = 0;
  double train_s = 0;
  for (int64_t s = 0; s <= train_steps; ++s) {  // step 0 is a warm-up, not timed
    auto b = stream->batch(0, s % per_epoch).to(dev);
    auto t = clock::now();
    opt.zero_grad();
    tasks::Forward f;
    {
      device::Autocast ac(dev, bf16);
      f = task->forward(*model, b);
    }
    (f.loss_sum / std::max<double>(1.0, f.sums("targets"))).backward();
    opt.step();
    if (s > 0) {
      train_s += std::chrono::duration<double>(clock::now() - t).count();
      train_tokens += static_cast<double>(b.num_tokens);
    }
  }
  double data_tps = data_tokens / data_s, train_tps = train_tokens / train_s;
  return fmt::format(
      "task {} ({} positions, {} attention, {}), seq_len {}, batch {}, {} threads\n"
      "  batch stream: {:>12.0f} tokens/s ({} batches)\n"
      "  training:     {:>12.0f} tokens/s ({} steps, forward + backward + AdamW)\n"
      "  the stream is {:.0f}x faster than training\n",
      c.task.type(), c.model.position.type(), config::to_string(c.model.attention.kernel),
      config::to_string(c.train.precision), c.task.seq_len, c.train.batch_size, threads, data_tps,
      batches, train_tps, train_steps, data_tps / train_tps);
}

}  // namespace ropelab::train
