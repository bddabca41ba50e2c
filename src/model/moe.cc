#include "model/moe.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "core/compat.h"
#include "core/cpu_kernels.h"
#include "core/error.h"
#include "core/grouped_linear.h"
#include "core/op_profile.h"
#include "core/row_gather.h"

namespace glint {

TokenDispatcher::Dispatched sort_by_expert(const at::Tensor& x, const Routing& r, int64_t num_experts,
                                           at::Tensor* device_counts) {
  const at::Tensor& expert_ids_TK = r.experts;
  int64_t K = expert_ids_TK.size(1);
  at::Tensor flat_experts = expert_ids_TK.reshape({-1});            // [N]
  // Stable sort keeps token order inside each expert group: deterministic results.
  at::Tensor order = std::get<1>(at::sort(flat_experts, /*stable=*/true, 0, false));  // [N]
  TokenDispatcher::Dispatched d;
  d.token_index = at::div(order, K, "floor");                       // [N]
  // order's inverse: copy k of token t sits at readers[t, k].
  d.readers = at::empty_like(order).scatter_(0, order, at::arange(order.numel(), order.options())).view({-1, K});
  d.weight = r.weights.reshape({-1}).index_select(0, order);        // [N]
  d.tokens = gather_rows(x, d.token_index, d.readers);              // [N, H]
  if (r.tags.defined()) d.tags = r.tags.index_select(0, d.token_index);  // [N]
  at::Tensor counts = at::bincount(flat_experts, {}, num_experts);  // [E] on x's device
  if (device_counts) {
    *device_counts = counts;
    return d;
  }
  counts = counts.to(at::kCPU);  // the one wait for the device
  d.counts.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + num_experts);
  return d;
}

at::Tensor weighted_combine(const at::Tensor& sorted_out, const TokenDispatcher::Dispatched& d,
                            int64_t num_tokens) {
  GLINT_ASSERT(d.readers.size(0) == num_tokens, "combine: ", d.readers.size(0), " tokens dispatched, ", num_tokens,
               " expected");
  return weighted_row_sum(sorted_out, d.weight, d.token_index, d.readers);
}

TokenDispatcher::Dispatched LocalTokenDispatcher::dispatch(const at::Tensor& x, const Routing& r) {
  return sort_by_expert(x, r, num_experts_);
}

at::Tensor LocalTokenDispatcher::combine(const at::Tensor& expert_out, const Dispatched& d,
                                         int64_t num_tokens) {
  return weighted_combine(expert_out, d, num_tokens);
}

ExpertsImpl::ExpertsImpl(int64_t num_local, int64_t hidden, int64_t intermediate,
                         const TensorPlacement& p, int64_t first, ExpertForm form_)
    : first_expert(first), form(form_) {
  const int64_t H = hidden, I2 = 2 * intermediate, I = intermediate;
  gate_up_proj = register_parameter(
      "gate_up_proj", new_weight(form.in_major ? at::IntArrayRef{num_local, H, I2} : at::IntArrayRef{num_local, I2, H}, p));
  if (form.biases) gate_up_proj_bias = register_parameter("gate_up_proj_bias", new_weight({num_local, I2}, p));
  down_proj = register_parameter(
      "down_proj", new_weight(form.in_major ? at::IntArrayRef{num_local, I, H} : at::IntArrayRef{num_local, H, I}, p));
  if (form.biases) down_proj_bias = register_parameter("down_proj_bias", new_weight({num_local, H}, p));
}

at::Tensor& ExpertsImpl::packed(PackedExpert t) {
  switch (t) {
    case PackedExpert::kGateUp: return gate_up_proj;
    case PackedExpert::kDown: return down_proj;
    case PackedExpert::kGateUpBias: return gate_up_proj_bias;
    case PackedExpert::kDownBias: return down_proj_bias;
  }
  GLINT_ASSERT(false);
  return gate_up_proj;
}

namespace {
// Each grouped row's expert bias: bias [E_local, out] repeated counts[e] times -> [N, out].
at::Tensor row_bias(const at::Tensor& bias, const std::vector<int64_t>& counts) {
  at::Tensor repeats = at::tensor(counts, at::kLong).to(bias.device(), /*non_blocking=*/true);
  return bias.repeat_interleave(repeats, 0);
}
}  // namespace

at::Tensor ExpertsImpl::project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                const ExpertAdapter* adapter, const std::vector<int64_t>& counts,
                                const at::Tensor& tags) const {
  // Where one grouped-GEMM kernel runs (a GPU's), the bias and the adapter's update are
  // added after it; elsewhere the base GEMMs (each from its expert's bias) and a plain
  // LoRA's two thin ones run on each group's rows of one output (grouped_linear). A tenant
  // bank's update picks rows by tag: added after.
  const bool one_kernel = compat::grouped_mm_available(x, w);
  const LowRank lora = adapter && !one_kernel ? adapter->low_rank(x.scalar_type()) : LowRank{};
  const bool fold = !one_kernel && bias.defined() && bias.scalar_type() == x.scalar_type();
  at::Tensor y;
  if (!one_kernel && (!adapter || lora.A.defined())) {
    y = grouped_linear(x, w, counts, lora.A, lora.B, lora.scale, fold ? bias : at::Tensor());
    adapter = nullptr;
  } else {
    y = fold ? grouped_linear(x, w, counts, at::Tensor(), at::Tensor(), 1.0, bias)
             : compat::grouped_matmul(x, w, counts);
  }
  if (bias.defined() && !fold) y = y + row_bias(bias, counts);
  if (!adapter) return y;
  profile::Scope region("experts lora");
  return y + adapter->delta(x, counts, tags);
}

at::Tensor ExpertsImpl::forward(const at::Tensor& x, const std::vector<int64_t>& counts,
                                const at::Tensor& tags) {
  GLINT_ASSERT(int64_t(counts.size()) == num_local(), "counts ", counts.size(), " vs ",
               num_local(), " local experts");
  const at::Tensor none;
  at::Tensor h = project(x, out_major(gate_up_proj), form.biases ? gate_up_proj_bias : none, gate_up_adapter.get(),
                         counts, tags);  // [N, 2I]
  at::Tensor act;
  {
    profile::Scope region("experts glu");
    act = glu_packed(h, form.interleaved, form.glu);  // [N, I]
  }
  return project(act, out_major(down_proj), form.biases ? down_proj_bias : none, down_adapter.get(), counts,
                 tags);  // [N, H]
}

RouterImpl::RouterImpl(const ModelConfig& c, const TensorPlacement& p, bool hash_routing, bool with_bias)
    : num_experts(c.num_experts),
      top_k(c.num_experts_per_tok),
      norm_topk_prob(c.norm_topk_prob),
      scoring(c.scoring_func == "sigmoid"        ? Scoring::kSigmoid
              : c.scoring_func == "sqrtsoftplus" ? Scoring::kSqrtSoftplus
                                                 : Scoring::kSoftmax),
      n_group(c.n_group),
      topk_group(c.topk_group),
      routed_scaling_factor(c.routed_scaling_factor) {
  weight = register_parameter("weight", new_weight({c.num_experts, c.hidden_size}, p));
  if (with_bias) bias = register_parameter("bias", new_weight({c.num_experts}, p));
  if (hash_routing)
    tid2eid = register_buffer("tid2eid", at::zeros({c.vocab_size, c.num_experts_per_tok},
                                                   at::TensorOptions().dtype(at::kLong).device(p.device)));
  else if (c.router_correction_bias)  // float32 whatever the model's dtype, as transformers keeps it
    e_score_correction_bias = register_buffer(
        "e_score_correction_bias",
        at::zeros({c.num_experts}, at::TensorOptions().dtype(p.dtype == at::kDouble ? at::kDouble : at::kFloat)
                                       .device(p.device)));
}

at::Tensor RouterImpl::scores(const at::Tensor& logits) const {
  switch (scoring) {
    case Scoring::kSigmoid: return at::sigmoid(logits);
    case Scoring::kSqrtSoftplus: return at::sqrt(at::softplus(logits));
    case Scoring::kSoftmax: break;
  }
  return at::softmax(logits, -1);
}

at::Tensor RouterImpl::select(const at::Tensor& logits, const at::Tensor& token_ids) const {
  at::NoGradGuard no_grad;
  if (tid2eid.defined()) {
    GLINT_CHECK(token_ids.defined() && token_ids.numel() == logits.size(0),
                "hash router: the token ids of its ", logits.size(0), " tokens are required");
    return tid2eid.index_select(0, token_ids.reshape({-1}).to(tid2eid.device()));
  }
  at::Tensor choice = scores(logits);  // [T, E]
  if (e_score_correction_bias.defined()) choice = choice + e_score_correction_bias.to(choice.scalar_type());
  if (n_group > 1) {
    // Group-limited: a group scores the sum of its two best experts; experts outside the
    // topk_group best groups are excluded (-inf, as DeepSeek's release code and newer
    // transformers do; a 0 there would let them win over kept experts with negative scores).
    const int64_t T = choice.size(0), per = num_experts / n_group;
    at::Tensor grouped = choice.view({T, n_group, per});
    at::Tensor group_scores = std::get<0>(grouped.topk(std::min<int64_t>(2, per), -1)).sum(-1);  // [T, G]
    at::Tensor kept = std::get<1>(group_scores.topk(topk_group, -1));                           // [T, topk_group]
    at::Tensor mask = at::zeros({T, n_group}, choice.options().dtype(at::kBool)).scatter_(1, kept, true);
    choice = choice.masked_fill(~mask.unsqueeze(-1).expand({T, n_group, per}).reshape({T, num_experts}),
                              -std::numeric_limits<double>::infinity());
  }
  return std::get<1>(at::topk(choice, top_k, -1));
}

Routing RouterImpl::route(const at::Tensor& x, const at::Tensor& token_ids) const {
  auto compute = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  Routing r;
  r.logits = at::linear(x.to(compute), weight.to(compute), bias.defined() ? bias.to(compute) : at::Tensor());  // [T, E]
  at::Tensor s = scores(r.logits);
  r.experts = select(r.logits, token_ids);                   // [T, K]
  at::Tensor w = s.gather(1, r.experts);                     // [T, K], differentiable
  if (norm_topk_prob)
    w = scoring == Scoring::kSoftmax ? w / w.sum(-1, /*keepdim=*/true) : w / (w.sum(-1, /*keepdim=*/true) + 1e-20);
  if (routed_scaling_factor != 1.0) w = w * routed_scaling_factor;
  r.weights = w.to(x.scalar_type());
  return r;
}

MoeBlockImpl::MoeBlockImpl(const ModelConfig& c, const TensorPlacement& p, MoeForm form)
    : num_experts(c.num_experts), top_k(c.num_experts_per_tok) {
  gate = register_module(form.router_name, Router(c, p, form.hash_routing, form.router_bias));
  if (form.experts.glu.limit == 0) form.experts.glu.limit = c.swiglu_limit;
  experts = register_module(
      "experts", Experts(c.num_experts, c.hidden_size, c.moe_intermediate_size, p, 0, form.experts));
  if (c.n_shared_experts > 0)
    shared_experts = register_module(
        "shared_experts",
        DenseMlp(c.hidden_size, c.n_shared_experts * c.moe_intermediate_size, p, c.swiglu_limit));
  if (c.shared_expert_intermediate_size > 0) {
    shared_experts = register_module("shared_expert", DenseMlp(c.hidden_size, c.shared_expert_intermediate_size, p));
    shared_expert_gate = register_module("shared_expert_gate", Linear(c.hidden_size, 1, false, p));
  }
  dispatcher = std::make_shared<LocalTokenDispatcher>(c.num_experts);
}

ActivationMemory MoeBlockImpl::activation_memory(const ActivationShape& s) const {
  const double T = double(s.rows * s.seq_len), db = double(s.dtype_bytes), cb = s.dtype_bytes == 8 ? 8 : 4;
  const double H = double(experts->hidden()), I = double(experts->intermediate()), E = double(num_experts),
               K = double(top_k);
  // Router: with a trained router, x in the compute type; the logits (the step keeps them
  // for the balancing loss) and the scores; the chosen weights, their sum, their sorted
  // copy; the choice, the sort order and where each copy sits (or, on ATen's operators,
  // each copy's token) (int64).
  double per_token = E * cb * (gate->scoring == RouterImpl::Scoring::kSqrtSoftplus ? 3 : 2) + (K + 1) * cb + K * db +
                     3 * K * 8;
  bool x_kept = false;
  if (gate->weight.requires_grad()) {
    per_token += H * cb;
    x_kept = cb == db;
  }
  // Each routed copy: its hidden row, the experts' GLU tensors, the adapters' rows and the
  // experts' output (the combine keeps it); where the combine runs on ATen's operators, the
  // output's weighted copy too (index_add keeps its source).
  const double adapters = (experts->gate_up_adapter ? experts->gate_up_adapter->kept_per_row() : 0) +
                          (experts->down_adapter ? experts->down_adapter->kept_per_row() : 0);
  const c10::ScalarType dtype = s.dtype_bytes == 8 ? at::kDouble : s.dtype_bytes == 4 ? at::kFloat : at::kBFloat16;
  const bool one_pass = cpu_kernels_run(experts->gate_up_proj.device(), dtype);
  per_token += K * db * (H + kGluKeptWidths * I + adapters + (one_pass ? 1 : 2) * H);
  // Trained expert biases: where a GPU's grouped GEMM runs they are added after it, and each
  // row's expert index is kept for both projections (elsewhere the GEMMs start from them).
  if (experts->form.biases && experts->gate_up_proj_bias.requires_grad() && !experts->gate_up_proj.device().is_cpu())
    per_token += K * 2 * 8;
  ActivationMemory m;
  if (shared_experts) {
    ActivationMemory shared = shared_experts->activation_memory(s);
    // x counted once, by whichever keeps it first.
    if (x_kept && shared_experts->keeps_input()) shared.saved -= T * H * db;
    x_kept |= shared_experts->keeps_input();
    m.saved += shared.saved;
    if (shared_expert_gate) {
      // sigmoid(gate(x)) and the shared output it scales.
      per_token += db * (1 + H + shared_expert_gate->adapter_kept_per_row());
      if (shared_expert_gate->keeps_input() && !x_kept) per_token += H * db;
    }
  }
  m.saved += T * per_token;
  // Backward of the combine and the experts: with the one-pass combine, each routed copy's
  // output gradient beside the down projection's input gradient, then the GLU's [2I]
  // gradient beside the gate_up input gradient (or its [I] input's); on ATen's operators
  // the combine's own copies and the products' besides.
  m.working = T * K * db * (one_pass ? 2 * I + std::max(H, I) : 2 * H + 2 * I);
  return m;
}

at::Tensor MoeBlockImpl::forward(const at::Tensor& x, Routing* routing_out, const at::Tensor& token_ids) {
  at::Tensor flat = x.reshape({-1, x.size(-1)});  // [T, H]
  std::optional<profile::Scope> region(std::in_place, "moe router");
  Routing r = route(flat, token_ids);
  if (token_tags && token_tags->rows.defined()) r.tags = token_tags->per_token(flat.size(0));
  region.emplace("moe dispatch");
  TokenDispatcher::Dispatched d = dispatcher->dispatch(flat, r);
  region.emplace("experts");
  at::Tensor y = experts->forward(d.tokens, d.counts, d.tags);
  region.emplace("moe combine");
  at::Tensor out = dispatcher->combine(y, d, flat.size(0)).view(x.sizes());
  region.emplace("shared experts");
  // The shared expert sees x in its own shape: a tenant's adapter there picks its rows.
  if (shared_expert_gate) out = out + at::sigmoid(shared_expert_gate->forward(x)) * shared_experts->forward(x);
  else if (shared_experts) out = out + shared_experts->forward(x);
  if (routing_out) *routing_out = std::move(r);
  return out;
}

at::Tensor MoeBlockImpl::forward(const at::Tensor& x, const LayerContext& ctx,
                                 std::vector<at::Tensor>* router_logits) {
  Routing r;
  at::Tensor ids = gate->tid2eid.defined() ? ctx.input_ids.reshape({-1}) : at::Tensor();
  at::Tensor y = forward(x, &r, ids);
  if (router_logits) router_logits->push_back(r.logits);
  return y;
}

at::Tensor TokenTags::per_token(int64_t tokens) const {
  const int64_t B = rows.size(0);
  GLINT_CHECK(B > 0 && tokens % B == 0, "token tags: ", tokens, " tokens are not whole rows of ", B, " sequences");
  return rows.repeat_interleave(tokens / B);  // row-major [B, S] flattened
}

at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits,
                               const at::Tensor& valid, int64_t num_experts, int64_t top_k) {
  GLINT_ASSERT(!router_logits.empty());
  at::Tensor idx = valid.reshape({-1}).nonzero().reshape({-1});
  std::vector<at::Tensor> rows;
  for (const auto& l : router_logits) rows.push_back(l.index_select(0, idx));
  at::Tensor logits = at::cat(rows, 0);                              // [L*T_valid, E]
  at::Tensor probs = at::softmax(logits, -1);
  at::Tensor selected = std::get<1>(at::topk(probs, top_k, -1));     // [., K]
  at::Tensor one_hot = at::one_hot(selected, num_experts).to(probs.scalar_type());  // [., K, E]
  at::Tensor tokens_per_expert = one_hot.mean(0);                    // [K, E]
  at::Tensor prob_per_expert = probs.mean(0);                        // [E]
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * double(num_experts);
}

}  // namespace glint
