// Options of a small, fast training run for the trainer tests: the built-in task on the
// built-in tiny model, float64, one thread.
#pragma once

#include <string>

#include "test_util.h"
#include "train/trainer.h"

namespace glint::testing {

inline TrainOptions small_train_options(const std::string& name) {
  TrainOptions o;
  o.output = fresh_temp_dir("trainer_" + name);
  o.steps = 3;
  o.batch_size = 8;
  o.lr = 1e-2;
  o.threads = 1;
  o.dtype = "float64";
  o.eval_samples = 8;
  return o;
}

}  // namespace glint::testing
