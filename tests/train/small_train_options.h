// Options of a small, fast training run for the trainer tests: the built-in task on the
// built-in tiny model, float64, one thread.
#pragma once

#include <string>
#include <utility>

#include "test_util.h"
#include "train/trainer.h"

namespace glint::testing {

inline TrainOptions small_train_options(const std::string& name) {
  TrainOptions o;
  o.run.output = fresh_temp_dir("trainer_" + name);
  o.optim.steps = 3;
  o.optim.batch_size = 8;
  o.optim.lr = 1e-2;
  o.model.threads = 1;
  o.model.dtype = "float64";
  o.data.eval_samples = 8;
  return o;
}

// Mean loss of the first and of the last `window` steps of `steps` training steps.
inline std::pair<double, double> first_and_last_loss(Trainer& t, int64_t steps, int64_t window = 10) {
  double first = 0, last = 0;
  for (int64_t s = 0; s < steps; ++s) {
    double loss = t.step(t.next_micro_batches()).loss;
    if (s < window) first += loss / double(window);
    if (s >= steps - window) last += loss / double(window);
  }
  return {first, last};
}

}  // namespace glint::testing
