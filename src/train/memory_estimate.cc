#include "train/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "model/causal_lm.h"
#include "model/chunked_loss.h"
#include "train/optimizer.h"

namespace glint {

namespace {

constexpr double kMb = 1024.0 * 1024.0;

std::string grouped(double mb) {
  std::string s = std::to_string(int64_t(std::llround(mb)));
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

}  // namespace

double MemoryEstimate::total_mb() const {
  return weights_mb + gradients_mb + activations_mb + loss_mb + gathered_mb + data_mb + overhead_mb;
}

std::string MemoryEstimate::line(int64_t rows, int64_t seq_len) const {
  std::ostringstream os;
  os << "estimated peak " << grouped(total_mb()) << " MB per rank = weights and optimizer " << grouped(weights_mb)
     << " + gradients " << grouped(gradients_mb) << " + activations " << grouped(activations_mb) << " (micro-batch "
     << rows << " x " << seq_len << " tokens) + loss " << grouped(loss_mb);
  if (gathered_mb > 0) os << " + gathered layers " << grouped(gathered_mb);
  os << " + data " << grouped(data_mb) << " + process " << grouped(overhead_mb);
  return os.str();
}

MemoryEstimate estimate_memory(CausalLMImpl& model, const MemoryInputs& in) {
  const ModelConfig& c = model.config;
  MemoryEstimate m;
  const double b = double(in.dtype_bytes), f32 = 4;
  const double T = double(in.rows) * double(in.seq_len), H = double(c.hidden_size);
  const double stream = H * double(c.hc_mult > 0 ? c.hc_mult : 1);  // the residual, per token
  ActivationShape shape;
  shape.rows = in.rows;
  shape.seq_len = in.seq_len;
  shape.dtype_bytes = in.dtype_bytes;
  auto bytes = [](const at::Tensor& p) { return double(p.numel()) * double(p.element_size()); };
  // With --full every weight trains, whatever it says now (under FSDP the shards, not the
  // layers' parameters, require grad); else the parameters that do (the adapters).
  auto trains = [&](const at::Tensor& p) { return in.full || p.requires_grad(); };
  double trainable = 0;
  for (const at::Tensor& p : model.parameters())
    if (trains(p)) trainable += bytes(p);
  // Each layer's share of this rank's gradients, in the proportion of the layer's trainable
  // parameters to the model's; the rest (embedding, head) is the root's.
  const double G = double(in.gradient_bytes);
  struct Layer {
    ActivationMemory a;
    double gradients;
  };
  std::vector<Layer> layers;
  double layer_bytes = 0, layers_gradients = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DecoderLayer layer = model.layer(l);
    double params = 0, own = 0;
    for (const at::Tensor& p : layer->parameters()) {
      params += bytes(p);
      if (trains(p)) own += bytes(p);
    }
    layer_bytes = std::max(layer_bytes, params);
    layers.push_back({layer->activation_memory(shape), trainable > 0 ? G * own / trainable : 0});
    layers_gradients += layers.back().gradients;
  }
  const double root_gradients = std::max(0.0, G - layers_gradients);
  // With one micro-batch a step's gradients appear as its backward runs (the head's in the
  // loss, a layer's in its backward, the embedding's last); with several, the earlier
  // micro-batches' are all there while a later one runs.
  const bool accumulating = in.micro_batches > 1;
  // The peak comes in the backward of some layer l: what the layers before it keep for
  // backward (under recompute only each layer's input), its own saved tensors (again,
  // under recompute) and its working set, the gradients made so far; ...
  double saved = 0, peak = 0, peak_gradients = 0, not_yet = 0;  // not_yet: the layers before l's
  for (size_t l = 0; l < layers.size(); ++l) {
    const double made = accumulating ? G : root_gradients + layers_gradients - not_yet;
    not_yet += layers[l].gradients;
    const double here = saved + layers[l].a.saved + layers[l].a.working;
    if (here + made > peak + peak_gradients) {
      peak = here;
      peak_gradients = made;
    }
    saved += in.recompute ? T * stream * b : layers[l].a.saved;
  }
  // ... or in the loss, every layer's tensors kept: the label rows, their gradient and one
  // tile of logits (model/chunked_loss.h); or once the backward is done, every gradient
  // there and the optimizer's two float32 temporaries of one block (train/optimizer.h). The embedding
  // and the final norm keep the stream twice.
  const double ends = 2 * T * stream * b;
  const double in_loss = 2 * T * H * b + std::min(double(kLossChunkElements), T * double(c.vocab_size)) * f32;
  const double loss_gradients = accumulating ? G : root_gradients;
  const double at_update = G + 2 * double(std::min(in.largest_gradient_numel, kAdamWBlockElements)) * f32;
  const double in_layer = peak + ends + T * H * b + peak_gradients;
  const double in_the_loss = saved + ends + in_loss + loss_gradients;
  if (at_update >= in_layer && at_update >= in_the_loss) {
    m.gradients_mb = at_update / kMb;
  } else if (in_the_loss >= in_layer) {
    m.activations_mb = (saved + ends) / kMb;
    m.loss_mb = in_loss / kMb;
    m.gradients_mb = loss_gradients / kMb;
  } else {
    m.activations_mb = (peak + ends) / kMb;
    m.loss_mb = T * H * b / kMb;
    m.gradients_mb = peak_gradients / kMb;
  }
  m.weights_mb = double(in.weight_bytes) / kMb;
  if (in.fsdp) {
    double root = (double(c.vocab_size) * H * (c.tie_word_embeddings ? 1 : 2) + H) * b;
    // The layer running, and with overlap the next one, prefetched; with --full as many
    // layers' gradients on their way to the reduce-scatter, and the root's.
    double gathered = (in.fsdp_overlap ? 2 : 1) * layer_bytes + root;
    if (in.full) gathered *= 2;
    m.gathered_mb = gathered / kMb;
  }
  m.data_mb = double(in.data_bytes) / kMb;
  m.overhead_mb = kProcessOverheadMb;
  return m;
}

double DecodeEstimate::total_mb() const { return weights_mb + state_mb + working_mb + overhead_mb; }

std::string DecodeEstimate::line(const DecodeInputs& in) const {
  std::ostringstream os;
  os << "estimated peak " << grouped(total_mb()) << " MB = weights " << grouped(weights_mb) << " + decoding state "
     << grouped(state_mb) << " (" << in.rows << (in.rows == 1 ? " row x " : " rows x ") << grouped(double(in.positions))
     << " positions) + working " << grouped(working_mb) << " + process " << grouped(overhead_mb);
  return os.str();
}

double decode_state_bytes_per_row(CausalLMImpl& model, int64_t positions, int64_t dtype_bytes) {
  const double H = double(model.config.hidden_size);
  double bytes = 0;
  bool history = false;
  for (int64_t l = 0; l < model.config.num_hidden_layers; ++l) {
    const AttentionModule& a = *model.layer(l)->self_attn;
    if (a.keeps_decode_state()) {
      bytes += a.decode_state_bytes(positions, dtype_bytes);
    } else {  // HistoryState: the sublayer's inputs
      bytes += double(positions) * H * double(dtype_bytes);
      history = true;
    }
  }
  if (history) bytes += double(positions) * double(sizeof(int64_t));  // the rows' token ids
  return bytes;
}

DecodeEstimate estimate_decode_memory(CausalLMImpl& model, const DecodeInputs& in) {
  const ModelConfig& c = model.config;
  DecodeEstimate e;
  const double b = double(in.dtype_bytes), V = double(c.vocab_size);
  const double H = double(c.hidden_size), stream = H * double(c.hc_mult > 0 ? c.hc_mult : 1);
  double weights = 0;
  for (const at::Tensor& p : model.parameters()) weights += double(p.numel()) * double(p.element_size());
  for (const at::Tensor& p : model.buffers()) weights += double(p.numel()) * double(p.element_size());
  e.weights_mb = weights / kMb;
  e.state_mb = double(in.rows) * decode_state_bytes_per_row(model, in.positions, in.dtype_bytes) / kMb;
  // Without gradients a sublayer's tensors go when it returns, and most go sooner: the
  // largest sublayer's (ActivationMemory::inference) beside the residual stream, its
  // normed input and its output. A module without a state of its own reruns over every
  // row's whole history at each step.
  auto largest_sublayer = [&](int64_t rows, int64_t seq_len, bool history_only) {
    ActivationShape shape;
    shape.rows = rows;
    shape.seq_len = seq_len;
    shape.dtype_bytes = in.dtype_bytes;
    double most = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      DecoderLayer layer = model.layer(l);
      if (history_only && layer->self_attn->keeps_decode_state()) continue;
      const ActivationMemory a = layer->self_attn->activation_memory(shape);
      most = std::max(most, a.inference_or_default());
      if (history_only) continue;
      const ActivationMemory m = layer->mlp->activation_memory(shape);
      most = std::max(most, m.inference_or_default());
    }
    return most + double(rows) * double(seq_len) * (stream + 2 * H) * b;
  };
  // The logits of each row's last position in the model's dtype, and in float64 on the
  // host with their log-softmax; with prompt log-probabilities a row's whole prompt.
  const double logits = double(in.rows) * V * (b + 16);
  const double prompt_logits = in.prompt_logprobs ? double(in.prompt) * V * (b + 16) : 0;
  const double prefill = largest_sublayer(in.rows, in.prompt, false) + std::max(logits, prompt_logits);
  bool history = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) history |= !model.layer(l)->self_attn->keeps_decode_state();
  const double step = (history ? largest_sublayer(in.rows, in.positions, true) : largest_sublayer(in.rows, 1, false)) + logits;
  e.working_mb = std::max(prefill, step) / kMb;
  e.overhead_mb = kProcessOverheadMb;
  return e;
}

double parse_memory_size(const std::string& text, const std::string& flag) {
  const char* s = text.c_str();
  char* end = nullptr;
  double v = std::strtod(s, &end);
  std::string unit = end ? std::string(end) : std::string();
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() == 2 && unit[1] == 'B') unit.resize(1);
  double scale = unit.empty() || unit == "M" ? 1 : unit == "G" ? 1024 : unit == "T" ? 1024 * 1024 : unit == "K" ? 1.0 / 1024 : -1;
  GLINT_USAGE_CHECK(end != s && scale > 0 && std::isfinite(v) && v > 0, flag, " ", text,
                    ": expected a positive size such as 24G, 24GB, 1500M or 1500 (MiB)");
  return v * scale;
}

double memory_budget_mb(const std::string& value, int local_ranks) {
  return value.empty() ? 0.9 * available_memory_mb(local_ranks) : parse_memory_size(value, "--memory-budget");
}

double available_memory_mb(int local_ranks) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb / 1024.0 / std::max(1, local_ranks);
  return 0;
}

}  // namespace glint
