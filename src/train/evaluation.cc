// Validation loss: the label-token mean cross-entropy of a held-out set, over all ranks,
// with the adapters as trained (no dropout) and nothing updated.
#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "data/collate.h"
#include "dist/comm.h"
#include "model/causal_lm.h"
#include "train/trainer.h"

namespace glint {

double Trainer::evaluate_loss(const std::vector<Sample>& samples, int64_t batch_size, int64_t slot,
                              int64_t* label_tokens) {
  GLINT_ASSERT(!samples.empty() && batch_size % comm_->size() == 0);
  const int W = comm_->size(), r = comm_->rank();
  const int64_t share = batch_size / W, n = int64_t(samples.size());
  int64_t batches = (n + batch_size - 1) / batch_size;
  if (opt_.data.eval_batches > 0) batches = std::min(batches, opt_.data.eval_batches);
  // Rows that train nothing fill the ranks' shares of the last batch, so that every rank
  // runs as many forwards (each one collective under FSDP and EP). Unpacked: a row per
  // sample, so the count does not depend on the lengths either.
  Sample filler = samples[0];
  std::fill(filler.labels.begin(), filler.labels.end(), kIgnoreIndex);
  CollateOptions collate_options = data_->collate;
  collate_options.pack = false;
  lora_.train(false);
  double ce = 0, count = 0;
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<const Sample*> picked;
    for (int64_t i = r * share; i < (r + 1) * share; ++i) {
      const int64_t k = b * batch_size + i;
      picked.push_back(k < n ? &samples[size_t(k)] : &filler);
    }
    std::vector<Batch> micro_batches = collate(picked, collate_options, micro_batch_size_);
    for (Batch& mb : micro_batches) {
      if (bank_) mb.row_tags = at::full({mb.input_ids.size(0)}, slot, at::kLong);
      count += double(mb.label_tokens);
    }
    const int64_t slots = bank_ ? bank_->num_slots() : 1;
    MicroBatchPass pass = engine_->forward_backward(
        micro_batches, slots, [](size_t, const Batch&, const LossParts&) { return at::Tensor(); },
        /*backward=*/false, /*router_stats=*/false);
    ce += pass.ce.sum().item<double>();
  }
  lora_.train(true);
  at::Tensor sums = at::tensor({ce, count}, at::kDouble);
  comm_->all_reduce_sum(sums);
  if (label_tokens) *label_tokens = int64_t(sums[1].item<double>());
  return sums[0].item<double>() / std::max(1.0, sums[1].item<double>());
}

}  // namespace glint
