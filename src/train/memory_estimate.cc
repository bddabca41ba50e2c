#include "train/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/block_attention.h"
#include "model/chunked_loss.h"

namespace glint {

namespace {

constexpr double kMb = 1024.0 * 1024.0;

// Elements autograd keeps per token of one attention block (norm input and output, the
// projections, q/k norms, rotary products, repeated k/v, the attention output).
double attention_elements_per_token(const ModelConfig& c) {
  const double H = double(c.hidden_size), D = double(c.head_dim);
  const double Nh = double(c.num_attention_heads), Nkv = double(c.num_key_value_heads);
  double e = 2 * H + (Nh + 2 * Nkv) * D + 2 * (Nh + Nkv) * D + 3 * (Nh + Nkv) * D + 2 * Nh * D;
  if (Nh > Nkv) e += 2 * Nh * D;  // k and v repeated per query head
  return e;
}

// Per token of one MLP block: norm, router (float32), and for each of the K routed copies
// its gathered input, gate/up outputs, activation, down input and output.
double mlp_elements_per_token(const ModelConfig& c, bool moe) {
  const double H = double(c.hidden_size);
  if (!moe) return 2 * H + 6 * double(c.intermediate_size);
  const double K = double(c.num_experts_per_tok), I = double(c.moe_intermediate_size);
  return 2 * H + 3 * double(c.num_experts) + K * (3 * H + 6 * I);
}

// Adapter intermediates per token (x A^T and its scaled copy) for one layer.
double lora_elements_per_token(const ModelConfig& c, bool moe, int64_t r) {
  if (r <= 0) return 0;
  double sites = 4 + (moe ? 2.0 * double(c.num_experts_per_tok) : 3.0);
  return 2 * double(r) * sites;
}

// Parameters of decoder layer l as gathered (experts: E / ep of them).
double layer_parameters(const ModelConfig& c, int64_t l, int64_t ep) {
  const double H = double(c.hidden_size), D = double(c.head_dim);
  const double Nh = double(c.num_attention_heads), Nkv = double(c.num_key_value_heads);
  double p = H * (Nh + 2 * Nkv) * D + Nh * D * H + 2 * D + 2 * H;
  if (c.is_moe_layer(l))
    p += double(c.num_experts) / double(std::max<int64_t>(1, ep)) * 3 * double(c.moe_intermediate_size) * H +
         double(c.num_experts) * H;
  else
    p += 3 * double(c.intermediate_size) * H;
  return p;
}

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

MemoryEstimate estimate_memory(const ModelConfig& c, const MemoryInputs& in) {
  MemoryEstimate m;
  const double b = double(in.dtype_bytes), f32 = 4;
  const double T = double(in.rows) * double(in.seq_len);
  const double H = double(c.hidden_size), Nh = double(c.num_attention_heads);
  // One layer's activations for T tokens: what autograd saves. Attention keeps no
  // probabilities (block attention recomputes them in backward, model/block_attention.h).
  auto layer_bytes = [&](int64_t l) {
    const bool moe = c.is_moe_layer(l);
    double per_token = attention_elements_per_token(c) + mlp_elements_per_token(c, moe) +
                       lora_elements_per_token(c, moe, in.lora_r);
    return T * per_token * b;
  };
  double saved = 0, largest = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    double x = layer_bytes(l);
    largest = std::max(largest, x);
    saved += in.recompute ? T * H * b : x;  // recompute keeps only each layer's input
  }
  // Backward of the largest layer: its activation gradients (freed as it goes: about a
  // quarter of its saved tensors at once, measured) and one attention block's scores
  // recomputed with their gradient (in float32, or float64); under recompute that layer's
  // saved tensors exist again too.
  const double scores = block_attention_scores(in.rows, int64_t(Nh), in.seq_len, 0);
  double transient = 0.25 * largest + 2 * scores * std::max(b, f32);
  if (in.recompute) transient += largest;
  m.activations_mb = (saved + transient + 2 * T * H * b) / kMb;  // + embedding and final norm
  // Loss: the hidden rows of label positions (at most T) and their gradient, and one
  // tile of logits twice (the tile and its exponentials).
  const double chunk = double(kLossChunkElements);
  m.loss_mb = (2 * T * H * b + 2 * std::min(chunk, T * double(c.vocab_size)) * f32) / kMb;
  m.weights_mb = double(in.weight_bytes) / kMb;
  m.gradients_mb = double(in.gradient_bytes) / kMb;
  if (in.fsdp) {
    double layer = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layer = std::max(layer, layer_parameters(c, l, in.ep));
    double root = double(c.vocab_size) * H * (c.tie_word_embeddings ? 1 : 2) + H;
    // The layer running and the next one, prefetched; with --full, two layers' gradients
    // in flight to the reduce-scatter and the root's.
    double gathered = (2 * layer + root) * b;
    if (in.full) gathered *= 2;
    m.gathered_mb = gathered / kMb;
  }
  m.data_mb = double(in.data_bytes) / kMb;
  m.overhead_mb = kProcessOverheadMb;
  return m;
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
