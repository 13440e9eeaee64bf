#include "run/run.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "dist/threads.h"
#include "dist/world.h"
#include "util/device.h"
#include "util/signals.h"
#include "weights/weights.h"

namespace ropelab::run {

namespace {

// The thread policy, the device and determinism, and the plan: what every use does first.
void open_common(Run& r) {
  r.threads = dist::apply_thread_policy(r.config.run.threads);
  r.device = device::resolve(r.config.run.device);
  r.plan = plan_of(r.config);
}

// The data as the use reads it. Preparing in a data-parallel run: rank 0 prepares (the others
// wait, since preparing twice would race on the same files), then every rank opens it.
void open_data(Run& r, DataUse use) {
  if (use == DataUse::kNone) return;
  const auto& w = dist::world();
  if (use == DataUse::kPrepare && w.is_main()) {
    r.data.emplace(r.plan, r.threads, /*prepare=*/true);
    w.mark_done("data");
    return;
  }
  if (use == DataUse::kPrepare) w.wait_for_main("data", "waiting for rank 0 to prepare the data");
  r.data.emplace(r.plan, r.threads, /*prepare=*/false);
}

// The task, with the data's vocabulary and tokenizer where the use reads data. A new run that
// reads none (the bench's synthetic batches) takes data.tokenizer.vocab_size.
void make_task(Run& r) {
  if (!r.data && r.vocab == 0) r.vocab = r.config.data.tokenizer.vocab_size;
  if (r.data) {
    r.vocab = r.data->vocab_size();
    r.source_vocab = r.data->source_vocab_size();
    r.task = tasks::make_task(r.config, r.vocab, &r.data->target_tokenizer(), r.source_vocab);
  } else {
    r.task = tasks::make_task(r.config, r.vocab);
  }
}

}  // namespace

data::Plan plan_of(const config::Config& c) { return data::plan(c.data, c.task.seq_len); }

data::Prepared prepare(const config::Config& c) {
  signals::install_handlers();
  return data::prepare(plan_of(c), dist::apply_thread_policy(c.run.threads));
}

Run open_new(const config::Config& c, DataUse data, const std::function<void()>& before_data) {
  signals::install_handlers();
  Run r;
  r.config = c;
  std::optional<weights::Pretrained> pretrained;
  if (!c.task.init_from.empty()) {
    pretrained = weights::read_pretrained(c.task.init_from);
    r.position_changes = weights::check_pretrained_architecture(r.config, *pretrained);
    r.pretrained_checkpoint = pretrained->checkpoint;
    r.pretrained_step = pretrained->step;
    weights::use_pretrained_tokenizer(r.config, *pretrained);
  }
  open_common(r);
  device::set_deterministic(r.config.run.deterministic);
  if (before_data) before_data();
  open_data(r, data);
  make_task(r);
  torch::manual_seed(static_cast<uint64_t>(r.config.run.seed));
  r.model = r.task->build_model();
  if (pretrained)
    r.pretrained = weights::init_from_pretrained(*r.model, r.config, r.vocab, *pretrained).str();
  r.model->to(r.device);
  return r;
}

Run open_trained(const std::string& source, DataUse data, bool best,
                 const std::vector<std::string>& overrides,
                 const std::function<void(const config::Config&)>& check) {
  auto rm = weights::load_run_model(source, best, overrides);
  if (check) check(rm.config);
  Run r;
  r.config = std::move(rm.config);
  r.run_dir = rm.run_dir;
  r.checkpoint = rm.checkpoint;
  r.step = rm.step;
  r.vocab = rm.vocab;
  r.source_vocab = rm.source_vocab;
  r.model = rm.model;
  open_common(r);
  open_data(r, data);
  make_task(r);
  r.model->to(r.device);
  return r;
}

}  // namespace ropelab::run
