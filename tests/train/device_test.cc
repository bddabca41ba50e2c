// Training on GLINT_TEST_DEVICE (default: cpu; scripts/gpu-check.sh sets cuda) against the
// float64 CPU run of the same seed and batches: every step's loss and the trained
// adapter, in float32 (tight) and in bf16 (loose: bf16 keeps 8 bits of mantissa).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "train/small_train_options.h"

namespace glint {
namespace {

std::string test_device() {
  const char* d = std::getenv("GLINT_TEST_DEVICE");
  return d && *d ? d : "cpu";
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<at::Tensor> trained;  // on the CPU, float64
};

TrainedRun train(const std::string& device, const std::string& dtype, bool full) {
  TrainOptions o = testing::small_train_options("device_" + dtype + (full ? "_full" : "_lora"));
  o.model.device = device;
  o.model.dtype = dtype;
  o.full = full;
  o.data.pack = true;  // several sequences a row: on a GPU in bf16, flash's variable-length kernel
  o.optim.steps = 5;
  // AdamW's first step moves each element by lr g / (|g| + eps). With eps 1e-8 an element
  // whose gradient is of that size steps by a fraction of lr that float32's rounding of g
  // decides (its sign too), and lr 1e-2 makes that a step the loss feels two steps later:
  // a comparison of arithmetic would measure that chaos instead. With eps 1e-6 the update
  // is a smooth function of the gradient at float32's rounding, and every element whose
  // gradient is above 1e-6 still takes AdamW's full normalised step.
  o.optim.adam.eps = 1e-6;
  o.data.eval_samples = 0;
  Trainer t(o);
  TrainedRun r;
  for (int s = 0; s < o.optim.steps; ++s) r.losses.push_back(t.step(t.next_micro_batches()).loss);
  for (const auto& p : t.trainable_parameters()) r.trained.push_back(p.detach().to(at::kCPU, at::kDouble));
  return r;
}

struct Case {
  std::string dtype;
  bool full;
  double loss_tol, weight_tol;  // relative
  std::string name;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class OnTheTestDevice : public ::testing::TestWithParam<Case> {};

TEST_P(OnTheTestDevice, TracksTheFloat64CpuRun) {
  const Case& c = GetParam();
  const std::string device = test_device();
  TrainedRun want = train("cpu", "float64", c.full);
  TrainedRun got = train(device, c.dtype, c.full);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  double worst_loss = 0;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    double rel = std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]);
    worst_loss = std::max(worst_loss, rel);
    EXPECT_LT(rel, c.loss_tol) << device << " " << c.dtype << " step " << s + 1 << ": " << got.losses[s]
                               << " vs " << want.losses[s];
  }
  ASSERT_EQ(got.trained.size(), want.trained.size());
  double diff2 = 0, norm2 = 0;
  for (size_t i = 0; i < want.trained.size(); ++i) {
    diff2 += (got.trained[i] - want.trained[i]).pow(2).sum().item<double>();
    norm2 += want.trained[i].pow(2).sum().item<double>();
  }
  const double weight_rel = std::sqrt(diff2 / norm2);
  EXPECT_LT(weight_rel, c.weight_tol) << device << " " << c.dtype;
  std::printf("%s %s: largest loss difference %.2e, trained weights %.2e (relative)\n", device.c_str(),
              c.name.c_str(), worst_loss, weight_rel);
}

// The tolerances, against what the CPU measures under libtorch 1.13 / 2.6 (largest loss
// difference; trained weights): LoraFloat32 4.6e-7 / 1.4e-6; 9.9e-6 / 1.9e-5. FullFloat32
// 2.1e-7 / 3.3e-7; 1.0e-6 / 1.1e-6. LoraBf16 5.7e-3 / 5.8e-3; 0.083 / 0.088. FullBf16
// 1.1e-2 / 1.9e-2; 0.045 / 0.043.
INSTANTIATE_TEST_SUITE_P(Dtypes, OnTheTestDevice,
                         ::testing::Values(Case{"float32", false, 1e-5, 1e-4, "LoraFloat32"},
                                           Case{"float32", true, 1e-5, 1e-4, "FullFloat32"},
                                           Case{"bfloat16", false, 2e-2, 0.2, "LoraBf16"},
                                           Case{"bfloat16", true, 3e-2, 0.1, "FullBf16"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace glint
