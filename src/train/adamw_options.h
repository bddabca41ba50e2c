// AdamW's hyperparameters, apart from the optimizer (train/optimizer.h) so that options
// headers need no libtorch.
#pragma once

#include <string>

namespace glint {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p -= lr * wd * p
  void validate(const std::string& where) const;
};

}  // namespace glint
