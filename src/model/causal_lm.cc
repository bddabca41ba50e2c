#include "model/causal_lm.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/modules/embedding.h>

#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/op_profile.h"
#include "model/chunked_loss.h"
#include "model/decode_cache.h"

namespace glint {

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, int64_t layer, const TensorPlacement& p) {
  LayerParts parts = family_for(c.model_type, "model config").make_layer(c, layer, p);
  self_attn = register_module(parts.attention_name, parts.attention);
  mlp = register_module(parts.mlp_name, parts.mlp);
  if (auto d = std::dynamic_pointer_cast<DenseMlpImpl>(mlp)) dense_mlp = DenseMlp(d);
  if (auto m = std::dynamic_pointer_cast<MoeBlockImpl>(mlp)) moe = MoeBlock(m);
  input_layernorm =
      register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps, p, c.norm_unit_offset));
  post_attention_layernorm = register_module("post_attention_layernorm",
                                             RMSNorm(c.hidden_size, c.rms_norm_eps, p, c.norm_unit_offset));
  if (c.hc_mult > 0) {
    attn_hc = register_module(
        "attn_hc", HyperConnection(c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps, p));
    ffn_hc = register_module(
        "ffn_hc", HyperConnection(c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps, p));
  }
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor& x, const LayerContext& ctx,
                                     std::vector<at::Tensor>* router_logits) {
  auto attention = [&](const at::Tensor& in) {
    at::Tensor normed;
    {
      profile::Scope region("norms");
      normed = input_layernorm->forward(in);
    }
    profile::Scope region("attention");
    if (!ctx.cache) return self_attn->forward(normed, ctx);
    return ctx.cache->recompute ? history_forward(*self_attn, normed, ctx) : self_attn->forward_cached(normed, ctx);
  };
  auto feed_forward = [&](const at::Tensor& in) {
    at::Tensor normed;
    {
      profile::Scope region("norms");
      normed = post_attention_layernorm->forward(in);
    }
    profile::Scope region(moe ? "moe" : "mlp");
    return mlp->forward(normed, ctx, router_logits);
  };
  if (attn_hc) {  // the sublayers name their own regions inside
    profile::Scope region("hyper-connections");
    return ffn_hc->forward(attn_hc->forward(x, attention), feed_forward);
  }
  at::Tensor h = x + attention(x);
  return h + feed_forward(h);
}

ActivationMemory DecoderLayerImpl::activation_memory(const ActivationShape& s) const {
  const double T = double(s.rows * s.seq_len), db = double(s.dtype_bytes);
  const double H = double(input_layernorm->weight.size(0));
  ActivationMemory m;
  // Each sublayer's norm and the residual after the sublayer: the stream after attention
  // and the layer's output (a norm's input is the stream, kept already), or with
  // hyper-connections what each keeps.
  m.saved = T * (input_layernorm->kept_bytes(s.dtype_bytes) + post_attention_layernorm->kept_bytes(s.dtype_bytes) +
                 (attn_hc ? attn_hc->kept_bytes(s.dtype_bytes) + ffn_hc->kept_bytes(s.dtype_bytes) : 2 * H * db));
  // Backward runs the feed-forward sublayer first: while attention's backward runs, what
  // the feed-forward sublayer and its residual kept is gone.
  const ActivationMemory attention = self_attn->activation_memory(s), feed_forward = mlp->activation_memory(s);
  const double after_attention = feed_forward.saved + T * post_attention_layernorm->kept_bytes(s.dtype_bytes) +
                                 T * (ffn_hc ? ffn_hc->kept_bytes(s.dtype_bytes) : H * db);
  m.saved += attention.saved + feed_forward.saved;
  m.working = std::max(feed_forward.working, std::max(0.0, attention.working - after_attention));
  return m;
}

namespace {
// Holds the embedding matrix under the HF name "embed_tokens.weight".
class EmbeddingHolder : public torch::nn::Module {
 public:
  EmbeddingHolder(int64_t vocab, int64_t hidden, const TensorPlacement& p) {
    weight = register_parameter("weight", new_weight({vocab, hidden}, p));
  }
  at::Tensor weight;
};
}  // namespace

DecoderStackImpl::DecoderStackImpl(const ModelConfig& c, const TensorPlacement& p) {
  auto holder = register_module("embed_tokens",
                                std::make_shared<EmbeddingHolder>(c.vocab_size, c.hidden_size, p));
  embed_tokens = holder.get();
  embed_tokens_weight = holder->weight;
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers->push_back(DecoderLayer(c, l, p));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps, p, c.norm_unit_offset));
  if (c.hc_mult > 0)
    hc_head = register_module("hc_head", HyperConnectionHead(c.hc_mult, c.hidden_size, c.hc_eps, c.rms_norm_eps, p));
}

CausalLMImpl::CausalLMImpl(const ModelConfig& c, const TensorPlacement& p)
    : config(c), family(&family_for(c.model_type, "model config")), placement(p) {
  c.validate("model config");
  model = register_module("model", DecoderStack(c, p));
  if (!c.tie_word_embeddings)
    lm_head = register_module("lm_head", Linear(c.hidden_size, c.vocab_size, false, p));
}

DecoderLayer CausalLMImpl::layer(int64_t i) const {
  return DecoderLayer(model->layers->ptr<DecoderLayerImpl>(i));
}

at::Tensor CausalLMImpl::lm_head_weight() const {
  return lm_head ? lm_head->weight : model->embed_tokens_weight;
}

ForwardOutput CausalLMImpl::forward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                    const at::Tensor& segment_ids, DecodeCache* cache) {
  GLINT_CHECK(input_ids.dim() == 2 && position_ids.sizes() == input_ids.sizes() &&
                  segment_ids.sizes() == input_ids.sizes(),
              "model input: input_ids, position_ids and segment_ids must all be [B,S]; got ",
              input_ids.sizes(), ", ", position_ids.sizes(), ", ", segment_ids.sizes());
  auto dev = placement.device;
  at::Tensor ids = input_ids.to(dev), pos = position_ids.to(dev);
  LayerContext ctx;
  const auto compute = placement.dtype == at::kDouble ? at::kDouble : at::kFloat;
  ctx.rope = family->rotary(config, pos, compute);
  ctx.layout = sequence_layout(segment_ids, dev);
  ctx.input_ids = ids;
  if (cache) {
    cache->begin(segment_ids, position_ids);
    ctx.cache = cache;
    bool any_history = false;  // a module recomputed over the history (AttentionModule::forward_cached)
    for (size_t l = 0; l < model->layers->size(); ++l) any_history |= cache->recompute || !layer(l)->self_attn->keeps_decode_state();
    if (any_history)
      cache->begin_history(ids, [&](const at::Tensor& p) { return family->rotary(config, p, compute); });
  }
  std::optional<profile::Scope> embed_region(std::in_place, "embedding");
  at::Tensor x = at::embedding(model->embed_tokens_weight, ids);  // [B,S,H]
  embed_region.reset();
  if (model->hc_head) x = x.unsqueeze(2).expand({-1, -1, config.hc_mult, -1}).contiguous();  // [B,S,n,H]
  ForwardOutput out;
  for (size_t l = 0; l < model->layers->size(); ++l) {
    DecoderLayer dl = layer(l);
    x = layer_runner ? layer_runner->run(l, *dl, x, ctx, &out.router_logits)
                     : dl->forward(x, ctx, &out.router_logits);
  }
  profile::Scope final_region("final norm");
  if (model->hc_head) x = model->hc_head->forward(x);
  out.hidden = model->norm->forward(x);
  if (cache) cache->commit();
  return out;
}

std::vector<ParameterSite> parameter_sites(CausalLMImpl& model) {
  std::unordered_map<const c10::TensorImpl*, std::pair<int64_t, bool>> where;
  std::unordered_map<const c10::TensorImpl*, PackedExpert> packed;
  std::unordered_map<const c10::TensorImpl*, bool> in_major;
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    for (const auto& p : layer->parameters()) where[p.unsafeGetTensorImpl()] = {l, false};
    if (!layer->moe) continue;
    for (const auto& p : layer->moe->experts->parameters()) where[p.unsafeGetTensorImpl()] = {l, true};
    for (PackedExpert t : {PackedExpert::kGateUp, PackedExpert::kDown, PackedExpert::kGateUpBias, PackedExpert::kDownBias})
      if (layer->moe->experts->packed(t).defined()) {
        packed[layer->moe->experts->packed(t).unsafeGetTensorImpl()] = t;
        in_major[layer->moe->experts->packed(t).unsafeGetTensorImpl()] = layer->moe->experts->form.in_major;
      }
  }
  std::vector<ParameterSite> out;
  for (const auto& item : model.named_parameters()) {
    ParameterSite site{item.key(), item.value()};
    site.family = model.family;
    auto it = where.find(item.value().unsafeGetTensorImpl());
    if (it != where.end()) std::tie(site.layer, site.expert) = it->second;
    if (auto p = packed.find(item.value().unsafeGetTensorImpl()); p != packed.end()) {
      site.packed = p->second;
      site.in_major = in_major.at(p->first);
    }
    out.push_back(std::move(site));
  }
  return out;
}

at::Tensor CausalLMImpl::logits(const at::Tensor& hidden) {
  if (lm_head) return lm_head->forward(hidden);
  return at::linear(hidden, model->embed_tokens_weight);
}

at::Tensor token_cross_entropy(CausalLMImpl& model, const at::Tensor& hidden,
                               const at::Tensor& labels) {
  const int64_t B = hidden.size(0), S = hidden.size(1), H = hidden.size(2);
  auto compute = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor target = labels.to(hidden.device()).narrow(1, 1, S - 1);  // [B,S-1]
  if (model.lm_head && model.lm_head->adapter) {  // an adapted head: the plain path
    at::Tensor logp = at::log_softmax(model.logits(hidden.narrow(1, 0, S - 1)).to(compute), -1);  // [B,S-1,V]
    at::Tensor nll = at::nll_loss(logp.reshape({-1, logp.size(-1)}), target.reshape({-1}), {},
                                  at::Reduction::None, /*ignore_index=*/-100);
    return nll.view(target.sizes());
  }
  // Only the positions whose next token is a label: their rows of hidden, in [B*S] order.
  at::Tensor trained = at::zeros({B, S}, target.options().dtype(at::kBool));
  trained.narrow(1, 0, S - 1).copy_(target.ne(-100));
  at::Tensor rows = trained.reshape({-1}).nonzero().reshape({-1});                    // [N]
  at::Tensor h = hidden.reshape({B * S, H}).index_select(0, rows);                     // [N,H]
  at::Tensor next = labels.to(hidden.device()).reshape({-1}).index_select(0, rows + 1);  // [N]
  at::Tensor nll = chunked_cross_entropy(h, model.lm_head_weight(), next);            // [N]
  // Back to [B,S-1] with zeros elsewhere: row b*S+i is position (b, i).
  at::Tensor out = at::zeros({B * S}, nll.options()).index_add(0, rows, nll);
  return out.view({B, S}).narrow(1, 0, S - 1);
}

LossParts causal_lm_loss(CausalLMImpl& model, const at::Tensor& input_ids,
                         const at::Tensor& labels, const at::Tensor& position_ids,
                         const at::Tensor& segment_ids, bool router_stats) {
  ForwardOutput out = model.forward(input_ids, position_ids, segment_ids);
  LossParts parts;
  profile::Scope region("head and loss");
  parts.token_ce = token_cross_entropy(model, out.hidden, labels);
  parts.ce_sum = parts.token_ce.sum();
  const ModelConfig& c = model.config;
  if (!router_stats || out.router_logits.empty()) return parts;
  at::Tensor valid = segment_ids.to(model.placement.device).ge(0).reshape({-1});
  if (c.output_router_logits)
    parts.aux_loss = load_balancing_loss(out.router_logits, valid, c.num_experts,
                                         c.num_experts_per_tok);
  {
    at::NoGradGuard no_grad;
    at::Tensor rows = valid.nonzero().reshape({-1});
    at::Tensor ids = input_ids.to(model.placement.device).reshape({-1}).index_select(0, rows);
    std::vector<at::Tensor> counts;
    size_t n = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      DecoderLayer layer = model.layer(l);
      if (!layer->moe) continue;
      // The experts the layer's router chose, from its logits.
      at::Tensor chosen = layer->moe->gate->select(out.router_logits.at(n++).index_select(0, rows), ids);
      counts.push_back(at::bincount(chosen.reshape({-1}), {}, c.num_experts));
    }
    parts.expert_tokens = at::stack(counts).to(at::kCPU);
  }
  return parts;
}

void update_router_biases(CausalLMImpl& model, const at::Tensor& load, double rate) {
  at::NoGradGuard no_grad;
  int64_t n = 0;
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    if (!layer->moe) continue;
    at::Tensor row = load[n++].to(at::kDouble);
    at::Tensor& bias = layer->moe->gate->e_score_correction_bias;
    if (!bias.defined()) continue;
    bias.add_(at::sign(row.mean() - row).to(bias.device(), bias.scalar_type()), rate);
  }
  GLINT_ASSERT(n == load.size(0), "load of ", load.size(0), " MoE layers for a model with ", n);
}

std::vector<std::pair<std::string, at::Tensor>> router_biases(CausalLMImpl& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& item : model.named_buffers())  // the hash routers' tid2eid tables are fixed, not biases
    if (item.value().is_floating_point()) out.emplace_back(item.key(), item.value().detach());
  return out;
}

void init_weights(CausalLMImpl& model, uint64_t seed) {
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  double std = model.config.initializer_range;
  // Norm weights start at one, linear biases at zero: found by module type.
  std::unordered_set<const c10::TensorImpl*> ones, zeros;
  for (const auto& m : model.modules()) {
    // (1 + w) norms start at zero, as transformers initialises them.
    if (auto* norm = dynamic_cast<RMSNormImpl*>(m.get()))
      (norm->unit_offset ? zeros : ones).insert(norm->weight.unsafeGetTensorImpl());
    if (auto* lin = dynamic_cast<LinearImpl*>(m.get()); lin && lin->bias.defined())
      zeros.insert(lin->bias.unsafeGetTensorImpl());
    // Routers' and experts' biases too.
    if (auto* router = dynamic_cast<RouterImpl*>(m.get()); router && router->bias.defined())
      zeros.insert(router->bias.unsafeGetTensorImpl());
    if (auto* ex = dynamic_cast<ExpertsImpl*>(m.get()); ex && ex->form.biases)
      for (PackedExpert t : {PackedExpert::kGateUpBias, PackedExpert::kDownBias})
        zeros.insert(ex->packed(t).unsafeGetTensorImpl());
  }
  for (auto& p : model.parameters()) {
    if (ones.count(p.unsafeGetTensorImpl())) {
      p.fill_(1.0);
    } else if (zeros.count(p.unsafeGetTensorImpl())) {
      p.zero_();
    } else {
      // Draw on CPU in float32 so the values do not depend on device or dtype.
      at::Tensor v = at::empty(p.sizes(), at::kFloat);
      v.normal_(0.0, std, gen);
      p.copy_(v);
    }
  }
  // Hash routers: K distinct experts per token id, drawn uniformly.
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    if (!layer->moe || !layer->moe->gate->tid2eid.defined()) continue;
    at::Tensor& table = layer->moe->gate->tid2eid;
    at::Tensor keys = at::empty({table.size(0), layer->moe->num_experts}, at::kFloat).uniform_(0.0, 1.0, gen);
    table.copy_(std::get<1>(keys.topk(table.size(1), -1)));
  }
}

}  // namespace glint
