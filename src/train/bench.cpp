#include "train/bench.h"

#include <ATen/autocast_mode.h>
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>

#include "data/prepare.h"
#include "tasks/task.h"
#include "util/platform.h"

namespace ropelab::train {

std::string bench_data(const config::Config& c, int64_t batches, int64_t train_steps) {
  int threads = c.run.threads > 0
                    ? static_cast<int>(c.run.threads)
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  platform::set_threads(threads);
  auto prepared = data::prepare(c.data, threads);
  auto tok = data::load_tokenizer(prepared);
  auto ds = data::load_split(prepared, "train", *tok);
  auto task = tasks::make_task(c, tok->vocab_size(), tok->kind());
  auto stream = task->stream(ds, true, c.task.seq_len);
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
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-4));
  bool bf16 = c.train.precision == "bf16";
  double train_tokens = 0;
  double train_s = 0;
  for (int64_t s = 0; s <= train_steps; ++s) {  // step 0 is a warm-up, not timed
    auto b = stream->batch(0, s % per_epoch);
    auto t = clock::now();
    opt.zero_grad();
    torch::Tensor loss;
    if (bf16) {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    }
    loss = task->loss(*model, b, nullptr);
    if (bf16) {
      at::autocast::clear_cache();
      at::autocast::set_cpu_enabled(false);
    }
    loss.backward();
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
      c.task.type, c.model.position.type, c.model.attention.kernel, c.train.precision,
      c.task.seq_len, c.train.batch_size, threads, data_tps, batches, train_tps, train_steps,
      data_tps / train_tps);
}

}  // namespace ropelab::train
