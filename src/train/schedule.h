// Learning-rate schedules as pure functions of the step (so a resumed run needs no scheduler
// state; libtorch's scheduler classes cannot be serialised anyway).
//   constant:      peak after warmup (linear warmup from 0)
//   linear:        linear warmup to peak, then linear decay to peak * min_lr_ratio at max_steps
//   cosine:        linear warmup, then cosine decay to peak * min_lr_ratio
//   inverse_sqrt:  fairseq: linear warmup from init_lr to peak, then peak * sqrt(warmup / step)
//   noam:          Vaswani et al. Eq. 3: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),
//                  multiplied by lr (use lr = 1 for the paper's schedule)
#pragma once
#include <cstdint>

#include "config/schema.h"

namespace ropelab::train {

// The learning rate for optimizer step `step` (1-based: the first update is step 1).
double learning_rate(const config::TrainConfig& t, int64_t d_model, int64_t step);

}  // namespace ropelab::train
