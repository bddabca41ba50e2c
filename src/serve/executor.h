// One clock cycle of the training service, run by every rank: a program of operations
// (JSON, the same on every rank, sent by rank 0) applied to the served model in order.
//
// Operations ({"op": ...}):
//   add           {tenant, lora:{r, alpha, rslora?, target_modules, target_parameters}, seed,
//                 trainable, adapter_dir?}: a fresh adapter, or a saved PEFT adapter's
//   remove        {tenant}
//   load_state    {tenant, dir, optimizer}: a saved tenant state (train/run_checkpoint.h form)
//   page_out      {tenant, dir}: its whole state (optimizer and accumulated gradients) into
//                 dir, then its slot freed (kept when the save fails)
//   page_in       {tenant, lora, seed, dir}: a tenant back from page_out's dir, exactly
//                 as it left ({step}: its optimizer steps)
//   forward       {backward, items:[{tenant, loss, config, data:[Datum...]}]}: every item's
//                 datums in one mixed-tenant forward (and backward)
//   optim         {tenant, adam:{learning_rate, beta1, beta2, eps, weight_decay, grad_clip_norm}}
//   save_state    {tenant, dir, optimizer}
//   save_adapter  {tenant, dir, base_model}
//   sample        {requests:[{tenant|null, prompt, num_samples, seed, max_tokens, temperature,
//                 top_k, top_p, stop_token_ids, stop_sequences, prompt_logprobs}]}
// Each gives {"result": ...} or {"error": message, "category": "user" | "server"}; an
// operation's failure (the same on
// every rank: the inputs were validated before, file errors are agreed collectively)
// leaves the others to run.
#pragma once

#include <nlohmann/json.hpp>

namespace glint {

class Trainer;

class CycleExecutor {
 public:
  explicit CycleExecutor(Trainer& trainer) : trainer_(trainer) {}
  // Results in the order of program["ops"].
  nlohmann::json run(const nlohmann::json& program);

 private:
  nlohmann::json forward(const nlohmann::json& op);
  nlohmann::json sample(const nlohmann::json& op);
  Trainer& trainer_;
};

}  // namespace glint
