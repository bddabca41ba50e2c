// Independent float64 reference of the DeepSeek-V4 forward pass (model_type "deepseek_v4",
// e.g. DeepSeek-V4-Flash / -Pro), written as naive loops over tokens, heads, experts and
// hyper-connection streams from the Hugging Face transformers definition. It shares no code with
// src/ and is meant for tiny configurations only (hidden ~16-32, S up to a few dozen).
//
// Sources read (huggingface/transformers, path @ commit as reported by the code index):
//   src/transformers/models/deepseek_v4/modeling_deepseek_v4.py      @ 019760818965c71b0a4d38e95820ee0b6cee4240
//     (followed: IndexerScorer submodule, clamped shared expert, softmax comb + 2*sigmoid post)
//   src/transformers/models/deepseek_v4/modeling_deepseek_v4.py      @ 361455895daf94ca66f78cf6792b09af397b4b30
//     (older: weights_proj directly on the indexer, otherwise the same maths)
//   src/transformers/models/deepseek_v4/modular_deepseek_v4.py       @ 7fa433e14f25c22fcfad82ab1871efca572d58b5
//     and @ 02356fecf28001ff562e25a05cfc43f31ed5f892 (older still: sigmoid comb, post without the
//     factor 2, iters full row/column rounds, indexer picks gathered per query; NOT followed)
//   src/transformers/models/deepseek_v4/configuration_deepseek_v4.py @ 015c078164151a049126942989817713e83a8f3e
//     (followed; @ b5b741e52e24b1c394ae4a0b13df86846284a1d3 is older: it forced attention_factor
//     1.0 on the compress rope even when it was not YaRN and overrode an explicit value)
//   src/transformers/models/deepseek_v4/generation_deepseek_v4.py    @ b26080178d06d4375fdbfc4d7838ba4bee7318ff
//     (static caches only; no effect on a full-sequence forward)
//   src/transformers/modeling_rope_utils.py: the newest _compute_yarn_parameters text in the index
//     (the one that mentions "DS4" and reads partial_rotary_factor from the per-type dict); the
//     stored path version @ 0044e3b3facff1a1ad60b235c69d5b45beae75a4 is a 4.4x one.
//   src/transformers/masking_utils.py (sliding_window_overlay: kv_idx > q_idx - sliding_window).
//   src/transformers/conversion_mapping.py: the "deepseek_v4" entry of the newest stored text
//     (index id 52450703090; the path's own stored versions @ 44bcb9df / 000c33fd predate V4).
//
// The forward, per row of input_ids (positions 0..S-1, no cache, no padding):
//   X[t][n] = embed[id_t]                      n < hc_mult streams            [S, hc, H]
//   per layer, twice (attention with attn_hc + input_layernorm, then MoE with ffn_hc +
//   post_attention_layernorm):
//     f = UnweightedRMSNorm(flatten(X[t]))      length hc*H, stream-major, eps = rms_norm_eps
//     m = fn f                                  (2+hc)*hc values
//     pre_n  = sigmoid(m[n] scale[0] + base[n]) + hc_eps
//     post_n = 2 sigmoid(m[hc+n] scale[1] + base[hc+n])                  (no eps)
//     C[i][j] = softmax_j(m[2hc + i*hc + j] scale[2] + base[2hc + i*hc + j]) + hc_eps
//     Sinkhorn: C[i][j] /= (sum_i C[i][j] + hc_eps)  (columns first), then hc_sinkhorn_iters - 1
//               times: rows (/= sum_j + hc_eps), then columns (/= sum_i + hc_eps)
//     x = sum_n pre_n X[t][n];  y = Sublayer(RMSNorm(x))
//     X'[t][k] = post_k y + sum_j C[j][k] X[t][j]      (C applied TRANSPOSED: sum over its first
//                                                       index; Sinkhorn's C is not symmetric)
//   head: pre_n = sigmoid((hc_fn UnweightedRMSNorm(flatten X))_n hc_scale + hc_base_n) + hc_eps,
//         logits = lm_head RMSNorm_norm(sum_n pre_n X_n)
//
// Facts this file relies on (each easy to get wrong):
//  * Every weighted RMSNorm is w * (x / sqrt(mean x^2 + eps)) with a plain w (never 1 + w):
//    input_layernorm, post_attention_layernorm, norm, q_a_norm, kv_norm, and the compressors' /
//    indexer's kv_norm. Unweighted (no parameter): q_b_norm (per head, over head_dim) and the HC
//    input norms (over hc*H). All use rms_norm_eps; hc_eps is only the HC floor.
//    transformers computes norms, HC, Sinkhorn, compressor softmax and indexer scores in fp32 and
//    casts back; in float64 those upcasts change nothing, so none is mirrored here.
//  * RoPE is partial and INTERLEAVED: it touches only the LAST rd = int(head_dim *
//    partial_rotary_factor) dims of a head (rd = qk_rope_head_dim, 64 for Flash); pair i is
//    (D-rd+2i, D-rd+2i+1) rotated by angle pos*inv_freq[i]:
//    y0 = x0 cos - x1 sin, y1 = x1 cos + x0 sin. cos and sin are both multiplied by the rope's
//    attention_factor (1 for every V4 rope as the config builds them).
//  * Two rope sets: "main" (rope_type default, theta = rope_theta) for sliding-only layers;
//    "compress" (theta = compress_rope_theta, plus the rope_scaling keys, YaRN for the release)
//    for CSA/HCA layers' q and kv, for every compressor's entries and for the indexer's q. The
//    indexer uses the same rd, applied to the last rd dims of its index_head_dim heads.
//  * YaRN (compress): inv_freq[i] = interp[i] ramp[i] + extrap[i] (1 - ramp[i]),
//    extrap = theta^(-2i/rd), interp = extrap / factor, ramp[i] = clamp((i - low)/(high - low),
//    0, 1) (high += 0.001 if equal), low/high = floor/ceil of rd ln(orig / (beta 2 pi)) /
//    (2 ln theta) for beta_fast / beta_slow (absent or 0 -> 32 / 1), clamped to [0, rd-1].
//    orig = original_max_position_embeddings (default max_position_embeddings); factor = the
//    explicit factor, or max_position_embeddings / orig when it is null. `truncate` is read by
//    transformers from the TOP-LEVEL rope_parameters, which for V4 is {main, compress}, so it is
//    always true. attention_factor: the config sets it to 1.0 for a YaRN compress rope unless given
//    (the V4 reference does not scale cos/sin); otherwise get_mscale as in transformers.
//  * Attention: qr = q_a_norm(q_a_proj h); q = q_b_norm(q_b_proj qr per head); kv = kv_norm(
//    kv_proj h) is ONE head (num_key_value_heads is not read), used as both K and V; rope on q
//    and kv at the token position. Logits q.k * head_dim^-0.5 over the sliding keys
//    t - sliding_window < j <= t and the compressed entries the query may see; one sink logit
//    per head joins the softmax denominator only (its probability is dropped, never scaled).
//    Output o = sum p v is de-rotated on its rope dims at the QUERY position (same rotation with
//    -sin), because V carried the keys' rotation. Grouped output: heads are split into o_groups
//    contiguous groups; group g (its heads' outputs concatenated, nH*D/G values) is multiplied by
//    rows [g*R, (g+1)*R) of o_a_proj [G*R, nH*D/G]; the G*R vector goes through o_b_proj.
//  * HCA compressor (rate m'): c = kv_proj h, z = gate_proj h (head_dim each). Windows are
//    aligned to position 0: window w = tokens [w m', (w+1) m'); only complete windows form an
//    entry (the tail is dropped). Per channel, softmax over the m' tokens of z + position_bias[i]
//    (i = offset in the window); entry = sum softmax * c; then kv_norm; then compress-rope at
//    position w m' (the window's FIRST token).
//  * CSA compressor (rate m, overlapping): kv_proj / gate_proj / position_bias have 2*head_dim
//    channels = [a-half | b-half]. Entry w pools, per channel c < head_dim, the 2m slots
//    {a-half channel c of window w-1's tokens, gate + position_bias[i][c]} and
//    {b-half channel c + head_dim of window w's tokens, gate + position_bias[i][head_dim + c]};
//    window 0 has no previous window, so only its m b-slots (the missing ones get weight 0).
//    Then kv_norm and compress-rope at w m, as HCA.
//  * Causal rule for compressed entries (both kinds): query t sees entry w iff
//    w < (t + 1) / m (integer division), i.e. iff the last token of window w is <= t. For CSA
//    the a-half of window w+1 also contains window w's tokens, but entry w+1 is only visible
//    from t >= (w+2) m - 1, so nothing leaks.
//  * CSA indexer: its own overlapping compressor at index_head_dim (kv_proj, gate_proj,
//    position_bias [m, 2 dI], kv_norm [dI], compress rope) gives keys K[w]; its queries are
//    q_b_proj(qr) per index head (no norm), compress-rope at t; head weights
//    wgt[h] = (weights_proj h)[h] * index_n_heads^-0.5 (h = the attention input, i.e. the normed
//    collapsed stream); score[t][w] = sum_h wgt[h] * ReLU(q_h . K[w]) * index_head_dim^-0.5 (one
//    factor each, no softmax). Query t keeps the top min(index_topk, T) of all T entries after
//    the future ones are set to -inf, then drops any future pick: i.e. the best
//    min(index_topk, #causal) causal entries. Only those are visible to t in CSA attention (no
//    other causal mask is applied to CSA entries). torch.topk's tie order is unspecified; ties
//    are broken towards the lower entry index here (ReLU makes exact-zero ties possible: keep
//    tests away from them when index_topk < #causal). The selection carries no gradient.
//  * MoE: logits = gate.weight h; s = sqrt(softplus(logits)) (torch softplus: x > 20 -> x) for
//    scoring_func "sqrtsoftplus" ("sigmoid" also accepted); selection = top num_experts_per_tok
//    of s + e_score_correction_bias (ties -> lower expert) or, in "hash_moe" layers,
//    tid2eid[token id] (bias ignored). Weights = s[sel] / (sum s[sel] + 1e-20) *
//    routed_scaling_factor, always (norm_topk_prob and topk_method are not read). Expert e:
//    gu = gate_up_proj[e] h ([2I]: gate = rows [0, I), up = rows [I, 2I)),
//    g = min(gate, swiglu_limit), u = clamp(up, -swiglu_limit, swiglu_limit),
//    y = down_proj[e] (silu(g) u). The shared expert (one MLP of width moe_intermediate_size;
//    n_shared_experts is not read) applies the same clamps in 0197608 (older commits did not)
//    and is added unweighted. Both see the same normed input.
//  * Config spellings accepted, as DeepseekV4Config.__post_init__ folds them:
//    layer_types (explicit) > legacy compress_ratios (0 -> sliding_attention, 4 ->
//    compressed_sparse_attention, 128 -> heavily_compressed_attention; any other value is an
//    error, as in transformers) > default [HCA, HCA] + (i odd ? CSA : HCA for the rest); the list
//    is cut to num_hidden_layers (the released 44th entry is the MTP layer). Rates come from
//    compress_rates {compressed_sparse_attention: 4, heavily_compressed_attention: 128} (a key
//    missing from a given dict takes its default here), overridden by legacy compress_rate_csa /
//    compress_rate_hca. mlp_layer_types > first num_hash_layers (default 3) "hash_moe", rest "moe".
//    partial_rotary_factor > legacy qk_rope_head_dim / head_dim > 64/512. rope: a rope_parameters
//    dict holding both "main" and "compress" dicts is used as is (a sub-dict without
//    partial_rotary_factor means 1.0, as in transformers); otherwise main = {default,
//    rope_theta, partial_rotary_factor} and compress = {the flat rope_parameters or rope_scaling
//    keys ("type" read as "rope_type"), rope_theta = compress_rope_theta, partial_rotary_factor,
//    attention_factor = 1.0 if YaRN and not given}. sliding_window null or <= 0: no window.
//  * Layers >= num_hidden_layers (mtp.*) are never read. lm_head.weight falls back to the
//    embedding only when tie_word_embeddings is true.
//
// Checkpoint key names (released DeepSeek-V4 safetensors -> transformers), as the deepseek_v4
// entry of conversion_mapping.py renames them (rules apply in order, each on the previous
// result; the model prefix "model." is added by the loader for ForCausalLM):
//   embed.weight                          -> model.embed_tokens.weight
//   head.weight                           -> lm_head.weight
//   norm.weight                           -> model.norm.weight
//   hc_head_fn / hc_head_base / hc_head_scale -> model.hc_head.hc_fn / .hc_base / .hc_scale
//   layers.L.attn_norm.weight             -> model.layers.L.input_layernorm.weight
//   layers.L.ffn_norm.weight              -> model.layers.L.post_attention_layernorm.weight
//   layers.L.hc_attn_{fn,base,scale}      -> model.layers.L.attn_hc.{fn,base,scale}
//   layers.L.hc_ffn_{fn,base,scale}       -> model.layers.L.ffn_hc.{fn,base,scale}
//   layers.L.attn.attn_sink               -> model.layers.L.self_attn.sinks
//   layers.L.attn.wq_a.*                  -> model.layers.L.self_attn.q_a_proj.*
//   layers.L.attn.q_norm.weight           -> model.layers.L.self_attn.q_a_norm.weight
//   layers.L.attn.wq_b.*                  -> model.layers.L.self_attn.q_b_proj.*
//   layers.L.attn.wkv.*                   -> model.layers.L.self_attn.kv_proj.*
//   layers.L.attn.kv_norm.weight          -> model.layers.L.self_attn.kv_norm.weight
//   layers.L.attn.wo_a.* / wo_b.*         -> model.layers.L.self_attn.o_a_proj.* / o_b_proj.*
//   layers.L.attn.compressor.wkv.weight   -> model.layers.L.self_attn.compressor.kv_proj.weight
//   layers.L.attn.compressor.wgate.weight -> model.layers.L.self_attn.compressor.gate_proj.weight
//   layers.L.attn.compressor.norm.weight  -> model.layers.L.self_attn.compressor.kv_norm.weight
//   layers.L.attn.compressor.ape          -> model.layers.L.self_attn.compressor.position_bias
//   layers.L.attn.indexer.wq_b.*          -> model.layers.L.self_attn.compressor.indexer.q_b_proj.*
//   layers.L.attn.indexer.weights_proj.weight
//        -> model.layers.L.self_attn.compressor.indexer.scorer.weights_proj.weight (0197608's
//           module path; the stored conversion_mapping text maps it to
//           ...compressor.indexer.weights_proj.weight, the path of 361455895 and older. Both are
//           accepted here.)
//   layers.L.attn.indexer.compressor.{wkv,wgate}.weight
//        -> model.layers.L.self_attn.compressor.indexer.{kv_proj,gate_proj}.weight
//   layers.L.attn.indexer.compressor.norm.weight -> ...self_attn.compressor.indexer.kv_norm.weight
//   layers.L.attn.indexer.compressor.ape  -> ...self_attn.compressor.indexer.position_bias
//   layers.L.ffn.gate.weight              -> model.layers.L.mlp.gate.weight
//   layers.L.ffn.gate.bias                -> model.layers.L.mlp.gate.e_score_correction_bias
//   layers.L.ffn.gate.tid2eid             -> model.layers.L.mlp.gate.tid2eid (hash layers)
//   layers.L.ffn.shared_experts.w1/w2/w3.* -> model.layers.L.mlp.shared_experts.gate_proj/
//                                             down_proj/up_proj.*
//   layers.L.ffn.experts.E.w1.weight + .w3.weight (all E) -> model.layers.L.mlp.experts.gate_up_proj
//        [E, 2I, H] = stack over E of cat([w1_E, w3_E], rows)   (MergeModulelist(0), Concatenate(1))
//   layers.L.ffn.experts.E.w2.weight (all E) -> model.layers.L.mlp.experts.down_proj [E, H, I]
//   mtp.*                                 -> ignored (_keys_to_ignore_on_load_unexpected)
// On disk (V4-Flash; dequantise before the renames above): FP8 linears (wq_a, wq_b, wkv, wo_a,
// wo_b, indexer.wq_b, shared_experts.w1/w2/w3) are F8_E4M3 .weight plus an F8_E8M0 (ue8m0) .scale
// with one byte per 128x128 block: W[i][j] = e4m3(W[i][j]) * 2^(s - 127), s = scale[i/128][j/128]
// (transformers' FP8 quantizer renames .scale to .weight_scale_inv first). Routed experts are
// FP4: .weight I8 [out, in/2] holding two e2m1 codes per byte (low nibble = even column; codes
// 0..7 = 0, .5, 1, 1.5, 2, 3, 4, 6, bit 3 = sign) and .scale F8_E8M0 [out, in/32] (1x32 blocks
// along the input dim): W[i][j] = e2m1 * 2^(s - 127). Compressor / indexer-compressor wkv/wgate
// and indexer.weights_proj, gate.weight, embed, head and the norms are BF16; attn_sink, ape,
// hc_* and gate.bias are F32; tid2eid is an integer table [vocab, num_experts_per_tok].
//
// Shape legend: B batch rows, S tokens per row, H hidden_size, V vocab_size, nH heads,
//   D head_dim, rd rope dims, Cq q_lora_rank, G o_groups, R o_lora_rank, hc hc_mult,
//   E n_routed_experts, K num_experts_per_tok, I moe_intermediate_size, nI index_n_heads,
//   dI index_head_dim, m compress rate, T compressed entries of a row.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace glint::testing {
namespace dsv4_ref {

using Vec = std::vector<double>;

inline constexpr const char* kSliding = "sliding_attention";
inline constexpr const char* kCsa = "compressed_sparse_attention";
inline constexpr const char* kHca = "heavily_compressed_attention";

// ---------------------------------------------------------------- config

template <class T>
T json_or(const nlohmann::json& j, const char* key, T def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  return it->get<T>();
}

// Inverse frequencies of one rope set, and the factor transformers multiplies cos and sin by.
struct RopeTable {
  Vec inv_freq;  // [rd/2]
  double attention_scaling = 1.0;
  int64_t rope_dims() const { return 2 * int64_t(inv_freq.size()); }
};

inline double yarn_mscale(double scale, double mscale = 1.0) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// One rope sub-dict ({rope_type, rope_theta, partial_rotary_factor, factor, ...}) -> table.
inline RopeTable rope_from_params(const nlohmann::json& p, int64_t head_dim, double max_position_embeddings) {
  std::string type = json_or<std::string>(p, "rope_type", json_or<std::string>(p, "type", "default"));
  double base = p.at("rope_theta").get<double>();
  double prf = json_or<double>(p, "partial_rotary_factor", 1.0);
  int64_t dim = int64_t(double(head_dim) * prf);
  int64_t half = (dim + 1) / 2;  // torch.arange(0, dim, 2)
  RopeTable r;
  r.inv_freq.resize(half);
  if (type == "default") {
    for (int64_t i = 0; i < half; ++i) r.inv_freq[i] = 1.0 / std::pow(base, double(2 * i) / double(dim));
    return r;
  }
  if (type != "yarn") throw std::invalid_argument("deepseek_v4 reference: unsupported rope_type " + type);
  double orig = json_or<double>(p, "original_max_position_embeddings", max_position_embeddings);
  double factor = json_or<double>(p, "factor", max_position_embeddings / orig);
  double mscale = json_or<double>(p, "mscale", 0.0), mscale_all = json_or<double>(p, "mscale_all_dim", 0.0);
  auto af = p.find("attention_factor");
  if (af != p.end() && !af->is_null())
    r.attention_scaling = af->get<double>();
  else if (mscale != 0.0 && mscale_all != 0.0)
    r.attention_scaling = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all);
  else
    r.attention_scaling = yarn_mscale(factor);
  double beta_fast = json_or<double>(p, "beta_fast", 0.0), beta_slow = json_or<double>(p, "beta_slow", 0.0);
  if (beta_fast == 0.0) beta_fast = 32.0;  // `or 32` in transformers
  if (beta_slow == 0.0) beta_slow = 1.0;
  auto correction_dim = [&](double rot) {
    const double pi = 3.14159265358979323846;
    return double(dim) * std::log(orig / (rot * 2.0 * pi)) / (2.0 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(beta_slow)), double(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    double extrap = 1.0 / std::pow(base, double(2 * i) / double(dim));
    double interp = extrap / factor;
    double ramp = std::min(1.0, std::max(0.0, (double(i) - low) / (high - low)));
    r.inv_freq[i] = interp * ramp + extrap * (1.0 - ramp);
  }
  return r;
}

struct Config {
  int64_t vocab = 129280, hidden = 4096, layers = 43, heads = 64, head_dim = 512, q_lora = 1024;
  int64_t o_groups = 8, o_lora = 1024, experts = 256, top_k = 6, inter = 2048;
  int64_t index_heads = 64, index_head_dim = 128, index_topk = 512;
  int64_t hc = 4, sinkhorn_iters = 20, sliding_window = 128;  // <= 0: unlimited
  int64_t rate_csa = 4, rate_hca = 128;
  double rms_eps = 1e-6, hc_eps = 1e-6, swiglu_limit = 10.0, routed_scaling = 1.5;
  std::string scoring_func = "sqrtsoftplus";
  bool tie_word_embeddings = false;
  std::vector<std::string> layer_types, mlp_layer_types;
  RopeTable rope_main, rope_compress;
};

inline Config parse_config(const nlohmann::json& j) {
  Config c;
  c.vocab = json_or<int64_t>(j, "vocab_size", c.vocab);
  c.hidden = json_or<int64_t>(j, "hidden_size", c.hidden);
  c.layers = json_or<int64_t>(j, "num_hidden_layers", c.layers);
  c.heads = json_or<int64_t>(j, "num_attention_heads", c.heads);
  c.head_dim = json_or<int64_t>(j, "head_dim", c.head_dim);
  c.q_lora = json_or<int64_t>(j, "q_lora_rank", c.q_lora);
  c.o_groups = json_or<int64_t>(j, "o_groups", c.o_groups);
  c.o_lora = json_or<int64_t>(j, "o_lora_rank", c.o_lora);
  c.experts = json_or<int64_t>(j, "n_routed_experts", c.experts);
  c.top_k = json_or<int64_t>(j, "num_experts_per_tok", c.top_k);
  c.inter = json_or<int64_t>(j, "moe_intermediate_size", c.inter);
  c.index_heads = json_or<int64_t>(j, "index_n_heads", c.index_heads);
  c.index_head_dim = json_or<int64_t>(j, "index_head_dim", c.index_head_dim);
  c.index_topk = json_or<int64_t>(j, "index_topk", c.index_topk);
  c.hc = json_or<int64_t>(j, "hc_mult", c.hc);
  c.sinkhorn_iters = json_or<int64_t>(j, "hc_sinkhorn_iters", c.sinkhorn_iters);
  c.sliding_window = json_or<int64_t>(j, "sliding_window", -1);
  if (j.find("sliding_window") == j.end()) c.sliding_window = 128;
  c.rms_eps = json_or<double>(j, "rms_norm_eps", c.rms_eps);
  c.hc_eps = json_or<double>(j, "hc_eps", c.hc_eps);
  c.swiglu_limit = json_or<double>(j, "swiglu_limit", c.swiglu_limit);
  c.routed_scaling = json_or<double>(j, "routed_scaling_factor", c.routed_scaling);
  c.scoring_func = json_or<std::string>(j, "scoring_func", c.scoring_func);
  c.tie_word_embeddings = json_or<bool>(j, "tie_word_embeddings", false);
  if (json_or<std::string>(j, "hidden_act", "silu") != "silu")
    throw std::invalid_argument("deepseek_v4 reference: hidden_act must be silu");
  if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "sigmoid")
    throw std::invalid_argument("deepseek_v4 reference: unsupported scoring_func " + c.scoring_func);

  // compress rates: dict (defaults for missing keys), then the legacy scalar overrides.
  if (auto it = j.find("compress_rates"); it != j.end() && it->is_object()) {
    c.rate_csa = json_or<int64_t>(*it, kCsa, c.rate_csa);
    c.rate_hca = json_or<int64_t>(*it, kHca, c.rate_hca);
  }
  c.rate_csa = json_or<int64_t>(j, "compress_rate_csa", c.rate_csa);
  c.rate_hca = json_or<int64_t>(j, "compress_rate_hca", c.rate_hca);

  const int64_t n = c.layers;
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    c.layer_types = it->get<std::vector<std::string>>();
  } else if (auto lc = j.find("compress_ratios"); lc != j.end() && !lc->is_null()) {
    for (int64_t r : lc->get<std::vector<int64_t>>()) {
      if (r == 0) c.layer_types.push_back(kSliding);
      else if (r == 4) c.layer_types.push_back(kCsa);
      else if (r == 128) c.layer_types.push_back(kHca);
      else throw std::invalid_argument("deepseek_v4 reference: compress_ratios takes only 0, 4, 128");
    }
  } else {
    for (int64_t i = 0; i < std::min<int64_t>(n, 2); ++i) c.layer_types.push_back(kHca);
    for (int64_t i = 0; i < std::max<int64_t>(n - 2, 0); ++i) c.layer_types.push_back(i % 2 ? kCsa : kHca);
  }
  if (int64_t(c.layer_types.size()) < n) throw std::invalid_argument("deepseek_v4 reference: layer_types too short");
  c.layer_types.resize(n);
  for (auto& t : c.layer_types)
    if (t != kSliding && t != kCsa && t != kHca) throw std::invalid_argument("deepseek_v4 reference: layer type " + t);

  if (auto it = j.find("mlp_layer_types"); it != j.end() && !it->is_null()) {
    c.mlp_layer_types = it->get<std::vector<std::string>>();
  } else {
    int64_t n_hash = json_or<int64_t>(j, "num_hash_layers", 3);
    for (int64_t i = 0; i < n; ++i) c.mlp_layer_types.push_back(i < n_hash ? "hash_moe" : "moe");
  }
  if (int64_t(c.mlp_layer_types.size()) < n)
    throw std::invalid_argument("deepseek_v4 reference: mlp_layer_types too short");
  c.mlp_layer_types.resize(n);
  for (auto& t : c.mlp_layer_types)
    if (t != "hash_moe" && t != "moe") throw std::invalid_argument("deepseek_v4 reference: mlp layer type " + t);

  double prf;
  if (auto it = j.find("partial_rotary_factor"); it != j.end() && !it->is_null())
    prf = it->get<double>();
  else if (auto q = j.find("qk_rope_head_dim"); q != j.end() && !q->is_null())
    prf = q->get<double>() / double(c.head_dim);
  else
    prf = 64.0 / 512.0;

  double max_pos = json_or<double>(j, "max_position_embeddings", 1048576.0);
  nlohmann::json main_p, compress_p;
  const nlohmann::json* rp = nullptr;
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) rp = &*it;
  if (rp && rp->contains("main") && (*rp)["main"].is_object() && rp->contains("compress") &&
      (*rp)["compress"].is_object()) {
    main_p = (*rp)["main"];
    compress_p = (*rp)["compress"];
  } else {
    nlohmann::json flat = nlohmann::json::object();
    if (rp) flat = *rp;
    else if (auto rs = j.find("rope_scaling"); rs != j.end() && rs->is_object()) flat = *rs;
    if (flat.contains("type") && !flat.contains("rope_type")) flat["rope_type"] = flat["type"];
    flat.erase("type");
    main_p = {{"rope_type", "default"},
              {"rope_theta", json_or<double>(j, "rope_theta", 10000.0)},
              {"partial_rotary_factor", prf}};
    compress_p = flat;
    compress_p.erase("main");
    compress_p.erase("compress");
    compress_p["rope_theta"] = json_or<double>(j, "compress_rope_theta", 160000.0);
    compress_p["partial_rotary_factor"] = prf;
    if (!compress_p.contains("rope_type")) compress_p["rope_type"] = "default";
    if (compress_p["rope_type"] == "yarn" && !compress_p.contains("attention_factor"))
      compress_p["attention_factor"] = 1.0;
  }
  c.rope_main = rope_from_params(main_p, c.head_dim, max_pos);
  c.rope_compress = rope_from_params(compress_p, c.head_dim, max_pos);
  if (c.rope_main.rope_dims() > c.head_dim || c.rope_compress.rope_dims() > c.index_head_dim ||
      c.rope_compress.rope_dims() > c.head_dim)
    throw std::invalid_argument("deepseek_v4 reference: rope dims exceed a head");
  if (c.heads % c.o_groups != 0) throw std::invalid_argument("deepseek_v4 reference: heads % o_groups");
  return c;
}

// ---------------------------------------------------------------- small maths

// Row-major float64 view of a weight; `keep` owns the storage.
struct Mat {
  at::Tensor keep;
  const double* p = nullptr;
  int64_t rows = 0, cols = 0;
  const double* row(int64_t r) const { return p + r * cols; }
};

inline double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y = W[row0 : row0 + n] x.
inline Vec matvec(const Mat& w, const double* x, int64_t row0 = 0, int64_t n = -1) {
  if (n < 0) n = w.rows - row0;
  Vec y(n);
  for (int64_t r = 0; r < n; ++r) y[r] = dot(w.row(row0 + r), x, w.cols);
  return y;
}

// w == nullptr: the unweighted norm.
inline Vec rms_norm(const double* x, int64_t n, const double* w, double eps) {
  double ms = 0;
  for (int64_t i = 0; i < n; ++i) ms += x[i] * x[i];
  double inv = 1.0 / std::sqrt(ms / double(n) + eps);
  Vec y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.0);
  return y;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x * sigmoid(x); }
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }  // torch threshold 20

// Interleaved rope on the last rope_dims() entries of x[0..dim); sin_sign -1 de-rotates.
inline void apply_rope(double* x, int64_t dim, const RopeTable& r, double pos, double sin_sign = 1.0) {
  const int64_t off = dim - r.rope_dims();
  for (size_t i = 0; i < r.inv_freq.size(); ++i) {
    double a = pos * r.inv_freq[i];
    double c = std::cos(a) * r.attention_scaling, s = sin_sign * std::sin(a) * r.attention_scaling;
    double x0 = x[off + 2 * i], x1 = x[off + 2 * i + 1];
    x[off + 2 * i] = x0 * c - x1 * s;
    x[off + 2 * i + 1] = x1 * c + x0 * s;
  }
}

// ---------------------------------------------------------------- hyper-connections

// comb [hc*hc] row-major: softmax over each row's logits, + eps, then columns first, then
// (iters - 1) rounds of rows then columns, each divided by (sum + eps).
inline Vec sinkhorn(const Vec& logits, int64_t hc, int64_t iters, double eps) {
  Vec c(hc * hc);
  for (int64_t i = 0; i < hc; ++i) {
    double mx = -std::numeric_limits<double>::infinity(), z = 0;
    for (int64_t j = 0; j < hc; ++j) mx = std::max(mx, logits[i * hc + j]);
    for (int64_t j = 0; j < hc; ++j) z += std::exp(logits[i * hc + j] - mx);
    for (int64_t j = 0; j < hc; ++j) c[i * hc + j] = std::exp(logits[i * hc + j] - mx) / z + eps;
  }
  auto columns = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      double s = 0;
      for (int64_t i = 0; i < hc; ++i) s += c[i * hc + j];
      for (int64_t i = 0; i < hc; ++i) c[i * hc + j] /= s + eps;
    }
  };
  auto rows = [&] {
    for (int64_t i = 0; i < hc; ++i) {
      double s = 0;
      for (int64_t j = 0; j < hc; ++j) s += c[i * hc + j];
      for (int64_t j = 0; j < hc; ++j) c[i * hc + j] /= s + eps;
    }
  };
  columns();
  for (int64_t it = 0; it + 1 < iters; ++it) {
    rows();
    columns();
  }
  return c;
}

struct HcWeights {
  Vec pre, post, comb;  // [hc], [hc], [hc*hc] (comb[i*hc + j])
};

// streams: one token's [hc][H], stream-major. fn [(2+hc)*hc, hc*H], base [(2+hc)*hc], scale [3].
inline HcWeights hc_weights(const double* streams, int64_t hc, int64_t H, const Mat& fn, const Vec& base,
                            const Vec& scale, double rms_eps, double hc_eps, int64_t iters) {
  Vec f = rms_norm(streams, hc * H, nullptr, rms_eps);
  Vec m = matvec(fn, f.data());
  HcWeights w;
  w.pre.resize(hc);
  w.post.resize(hc);
  Vec logits(hc * hc);
  for (int64_t n = 0; n < hc; ++n) {
    w.pre[n] = sigmoid(m[n] * scale[0] + base[n]) + hc_eps;
    w.post[n] = 2.0 * sigmoid(m[hc + n] * scale[1] + base[hc + n]);
  }
  for (int64_t k = 0; k < hc * hc; ++k) logits[k] = m[2 * hc + k] * scale[2] + base[2 * hc + k];
  w.comb = sinkhorn(logits, hc, iters, hc_eps);
  return w;
}

inline Vec hc_collapse(const double* streams, const Vec& pre, int64_t H) {
  Vec x(H, 0.0);
  for (size_t n = 0; n < pre.size(); ++n)
    for (int64_t d = 0; d < H; ++d) x[d] += pre[n] * streams[n * H + d];
  return x;
}

// streams <- post_k y + sum_j comb[j][k] streams_j  (comb used transposed).
inline void hc_expand(double* streams, const HcWeights& w, const double* y, int64_t H) {
  const int64_t hc = int64_t(w.post.size());
  Vec out(hc * H);
  for (int64_t k = 0; k < hc; ++k)
    for (int64_t d = 0; d < H; ++d) {
      double s = w.post[k] * y[d];
      for (int64_t j = 0; j < hc; ++j) s += w.comb[j * hc + k] * streams[j * H + d];
      out[k * H + d] = s;
    }
  std::copy(out.begin(), out.end(), streams);
}

// ---------------------------------------------------------------- compressors and indexer

// Pooled (pre-norm, pre-rope) entries of one compressor over a row. kvp / gp: per token the
// kv_proj / gate_proj outputs, C = D channels (non-overlapping, HCA) or 2D (overlapping, CSA:
// [a-half | b-half]). ape [m, C]. Returns [n_windows][D], n_windows = S / m.
inline std::vector<Vec> pool_entries(const std::vector<Vec>& kvp, const std::vector<Vec>& gp, const Mat& ape,
                                     int64_t m, int64_t D, bool overlap) {
  const int64_t n_win = int64_t(kvp.size()) / m;
  std::vector<Vec> out(n_win, Vec(D));
  std::vector<double> lg, val;
  for (int64_t w = 0; w < n_win; ++w)
    for (int64_t c = 0; c < D; ++c) {
      lg.clear();
      val.clear();
      if (overlap) {
        if (w > 0)
          for (int64_t i = 0; i < m; ++i) {
            lg.push_back(gp[(w - 1) * m + i][c] + ape.row(i)[c]);
            val.push_back(kvp[(w - 1) * m + i][c]);
          }
        for (int64_t i = 0; i < m; ++i) {
          lg.push_back(gp[w * m + i][D + c] + ape.row(i)[D + c]);
          val.push_back(kvp[w * m + i][D + c]);
        }
      } else {
        for (int64_t i = 0; i < m; ++i) {
          lg.push_back(gp[w * m + i][c] + ape.row(i)[c]);
          val.push_back(kvp[w * m + i][c]);
        }
      }
      double mx = *std::max_element(lg.begin(), lg.end()), z = 0, s = 0;
      for (size_t k = 0; k < lg.size(); ++k) z += std::exp(lg[k] - mx);
      for (size_t k = 0; k < lg.size(); ++k) s += std::exp(lg[k] - mx) / z * val[k];
      out[w][c] = s;
    }
  return out;
}

// Indices (ascending) of the entries query t keeps: the best min(topk, n_causal) of entries
// [0, n_causal) by score, ties towards the lower index.
inline std::vector<int64_t> select_entries(const Vec& scores, int64_t n_causal, int64_t topk) {
  n_causal = std::min<int64_t>(n_causal, int64_t(scores.size()));
  std::vector<int64_t> idx(n_causal);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  idx.resize(std::min<int64_t>(topk, n_causal));
  std::sort(idx.begin(), idx.end());
  return idx;
}

// ---------------------------------------------------------------- routing

inline double router_score(const std::string& fn, double logit) {
  return fn == "sigmoid" ? sigmoid(logit) : std::sqrt(softplus(logit));
}

// (expert, weight) pairs of one token. hash_row: tid2eid[token] ([k]) in hash layers, else null.
inline std::vector<std::pair<int64_t, double>> route(const Vec& logits, const Vec& bias, int64_t k, double scaling,
                                                     const std::string& score_fn, const int64_t* hash_row) {
  const int64_t E = int64_t(logits.size());
  Vec s(E);
  for (int64_t e = 0; e < E; ++e) s[e] = router_score(score_fn, logits[e]);
  std::vector<int64_t> sel;
  if (hash_row) {
    sel.assign(hash_row, hash_row + k);
  } else {
    std::vector<int64_t> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    auto biased = [&](int64_t e) { return s[e] + (bias.empty() ? 0.0 : bias[e]); };
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return biased(a) > biased(b); });
    sel.assign(idx.begin(), idx.begin() + k);
  }
  double z = 0;
  for (int64_t e : sel) z += s.at(e);
  std::vector<std::pair<int64_t, double>> out;
  for (int64_t e : sel) out.emplace_back(e, s[e] / (z + 1e-20) * scaling);
  return out;
}

// ---------------------------------------------------------------- weights

struct CompressorW {
  Mat kv, gate, ape;  // [C, H], [C, H], [m, C]
  Vec norm;           // [D]
  int64_t m = 0, dim = 0;
  bool overlap = false;
};

struct LayerW {
  std::string type, mlp_type;
  Vec in_norm, post_norm;
  Mat attn_fn, ffn_fn;
  Vec attn_base, attn_scale, ffn_base, ffn_scale;
  Mat q_a, q_b, kv, o_a, o_b;
  Vec q_a_norm, kv_norm, sinks;
  bool has_comp = false, has_indexer = false;
  CompressorW comp, idx_comp;
  Mat idx_q_b, idx_w;
  Mat gate;
  Vec e_bias;
  std::vector<int64_t> tid2eid;  // [V*K]
  at::Tensor gate_up, down;      // [E, 2I, H], [E, H, I] float64 contiguous
  Mat sh_gate, sh_up, sh_down;
};

struct ModelW {
  Mat embed, lm_head, head_fn;
  Vec norm, head_base, head_scale;
  std::vector<LayerW> layers;
};

// Looks a transformers name up as "model.<name>" first, then bare (lm_head.weight is bare), checks
// its shape and returns a contiguous float64 copy.
class WeightReader {
 public:
  explicit WeightReader(const std::map<std::string, at::Tensor>& w) : w_(w) {}

  const at::Tensor* find(const std::string& name) const {
    for (const char* prefix : {"model.", ""}) {
      auto it = w_.find(prefix + name);
      if (it != w_.end()) return &it->second;
    }
    return nullptr;
  }
  at::Tensor tensor(const std::string& name, std::vector<int64_t> shape) const {
    const at::Tensor* t = find(name);
    if (!t) throw std::invalid_argument("deepseek_v4 reference: missing weight " + name);
    return checked(*t, name, shape);
  }
  static at::Tensor checked(const at::Tensor& t, const std::string& name, const std::vector<int64_t>& shape) {
    if (t.sizes().vec() != shape) {
      std::string want;
      for (int64_t s : shape) want += std::to_string(s) + ",";
      throw std::invalid_argument("deepseek_v4 reference: " + name + " has shape " + std::to_string(t.dim()) +
                                  "-d " + c10::str(t.sizes()) + ", want [" + want + "]");
    }
    return t.detach().to(at::kDouble).contiguous();
  }
  Mat mat(const std::string& name, int64_t r, int64_t c) const {
    Mat m;
    m.keep = tensor(name, {r, c});
    m.p = m.keep.data_ptr<double>();
    m.rows = r;
    m.cols = c;
    return m;
  }
  Vec vec(const std::string& name, int64_t n) const {
    at::Tensor t = tensor(name, {n});
    return Vec(t.data_ptr<double>(), t.data_ptr<double>() + n);
  }

 private:
  const std::map<std::string, at::Tensor>& w_;
};

inline ModelW load_weights(const Config& c, const std::map<std::string, at::Tensor>& weights) {
  WeightReader r(weights);
  ModelW m;
  const int64_t H = c.hidden, hc = c.hc, D = c.head_dim, mix = (2 + hc) * hc;
  m.embed = r.mat("embed_tokens.weight", c.vocab, H);
  if (r.find("lm_head.weight") || !c.tie_word_embeddings)
    m.lm_head = r.mat("lm_head.weight", c.vocab, H);
  else
    m.lm_head = m.embed;
  m.norm = r.vec("norm.weight", H);
  m.head_fn = r.mat("hc_head.hc_fn", hc, hc * H);
  m.head_base = r.vec("hc_head.hc_base", hc);
  m.head_scale = r.vec("hc_head.hc_scale", 1);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    LayerW L;
    L.type = c.layer_types[l];
    L.mlp_type = c.mlp_layer_types[l];
    L.in_norm = r.vec(p + "input_layernorm.weight", H);
    L.post_norm = r.vec(p + "post_attention_layernorm.weight", H);
    L.attn_fn = r.mat(p + "attn_hc.fn", mix, hc * H);
    L.attn_base = r.vec(p + "attn_hc.base", mix);
    L.attn_scale = r.vec(p + "attn_hc.scale", 3);
    L.ffn_fn = r.mat(p + "ffn_hc.fn", mix, hc * H);
    L.ffn_base = r.vec(p + "ffn_hc.base", mix);
    L.ffn_scale = r.vec(p + "ffn_hc.scale", 3);
    L.q_a = r.mat(a + "q_a_proj.weight", c.q_lora, H);
    L.q_a_norm = r.vec(a + "q_a_norm.weight", c.q_lora);
    L.q_b = r.mat(a + "q_b_proj.weight", c.heads * D, c.q_lora);
    L.kv = r.mat(a + "kv_proj.weight", D, H);
    L.kv_norm = r.vec(a + "kv_norm.weight", D);
    L.o_a = r.mat(a + "o_a_proj.weight", c.o_groups * c.o_lora, c.heads * D / c.o_groups);
    L.o_b = r.mat(a + "o_b_proj.weight", H, c.o_groups * c.o_lora);
    L.sinks = r.vec(a + "sinks", c.heads);
    auto compressor = [&](const std::string& q, int64_t m_rate, int64_t dim, bool overlap) {
      CompressorW cw;
      const int64_t C = overlap ? 2 * dim : dim;
      cw.kv = r.mat(q + "kv_proj.weight", C, H);
      cw.gate = r.mat(q + "gate_proj.weight", C, H);
      cw.ape = r.mat(q + "position_bias", m_rate, C);
      cw.norm = r.vec(q + "kv_norm.weight", dim);
      cw.m = m_rate;
      cw.dim = dim;
      cw.overlap = overlap;
      return cw;
    };
    if (L.type == kHca) {
      L.has_comp = true;
      L.comp = compressor(a + "compressor.", c.rate_hca, D, false);
    } else if (L.type == kCsa) {
      L.has_comp = L.has_indexer = true;
      L.comp = compressor(a + "compressor.", c.rate_csa, D, true);
      const std::string ix = a + "compressor.indexer.";
      L.idx_comp = compressor(ix, c.rate_csa, c.index_head_dim, true);
      L.idx_q_b = r.mat(ix + "q_b_proj.weight", c.index_heads * c.index_head_dim, c.q_lora);
      L.idx_w = r.find(ix + "scorer.weights_proj.weight") ? r.mat(ix + "scorer.weights_proj.weight", c.index_heads, H)
                                                            : r.mat(ix + "weights_proj.weight", c.index_heads, H);
    }
    const std::string f = p + "mlp.";
    L.gate = r.mat(f + "gate.weight", c.experts, H);
    if (L.mlp_type == "hash_moe") {
      at::Tensor t = r.find(f + "gate.tid2eid") ? *r.find(f + "gate.tid2eid") : at::Tensor();
      if (!t.defined()) throw std::invalid_argument("deepseek_v4 reference: missing weight " + f + "gate.tid2eid");
      if (t.sizes().vec() != std::vector<int64_t>{c.vocab, c.top_k})
        throw std::invalid_argument("deepseek_v4 reference: tid2eid shape");
      at::Tensor ti = t.detach().to(at::kLong).contiguous();
      L.tid2eid.assign(ti.data_ptr<int64_t>(), ti.data_ptr<int64_t>() + ti.numel());
      for (int64_t e : L.tid2eid)
        if (e < 0 || e >= c.experts) throw std::invalid_argument("deepseek_v4 reference: tid2eid out of range");
    } else if (r.find(f + "gate.e_score_correction_bias")) {
      L.e_bias = r.vec(f + "gate.e_score_correction_bias", c.experts);  // a zero-initialised buffer
    }
    L.gate_up = r.tensor(f + "experts.gate_up_proj", {c.experts, 2 * c.inter, H});
    L.down = r.tensor(f + "experts.down_proj", {c.experts, H, c.inter});
    L.sh_gate = r.mat(f + "shared_experts.gate_proj.weight", c.inter, H);
    L.sh_up = r.mat(f + "shared_experts.up_proj.weight", c.inter, H);
    L.sh_down = r.mat(f + "shared_experts.down_proj.weight", H, c.inter);
    m.layers.push_back(std::move(L));
  }
  return m;
}

// ---------------------------------------------------------------- sublayers

// Normed, roped compressed entries [T][dim] of one compressor over h [S][H].
inline std::vector<Vec> run_compressor(const CompressorW& cw, const std::vector<Vec>& h, const RopeTable& rope,
                                       double eps) {
  std::vector<Vec> kvp, gp;
  for (const Vec& x : h) {
    kvp.push_back(matvec(cw.kv, x.data()));
    gp.push_back(matvec(cw.gate, x.data()));
  }
  std::vector<Vec> e = pool_entries(kvp, gp, cw.ape, cw.m, cw.dim, cw.overlap);
  for (int64_t w = 0; w < int64_t(e.size()); ++w) {
    e[w] = rms_norm(e[w].data(), cw.dim, cw.norm.data(), eps);
    apply_rope(e[w].data(), cw.dim, rope, double(w * cw.m));
  }
  return e;
}

// Attention sublayer of one row: h [S][H] (already input_layernorm'ed) -> [S][H].
inline std::vector<Vec> attention(const Config& c, const LayerW& L, const std::vector<Vec>& h) {
  const int64_t S = int64_t(h.size()), D = c.head_dim, nH = c.heads;
  const RopeTable& rope = L.type == kSliding ? c.rope_main : c.rope_compress;
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<Vec> qr(S), q(S), kv(S);
  for (int64_t t = 0; t < S; ++t) {
    Vec a = matvec(L.q_a, h[t].data());
    qr[t] = rms_norm(a.data(), c.q_lora, L.q_a_norm.data(), c.rms_eps);
    Vec qb = matvec(L.q_b, qr[t].data());
    q[t].resize(nH * D);
    for (int64_t hd = 0; hd < nH; ++hd) {
      Vec qh = rms_norm(qb.data() + hd * D, D, nullptr, c.rms_eps);
      apply_rope(qh.data(), D, rope, double(t));
      std::copy(qh.begin(), qh.end(), q[t].begin() + hd * D);
    }
    Vec k = matvec(L.kv, h[t].data());
    kv[t] = rms_norm(k.data(), D, L.kv_norm.data(), c.rms_eps);
    apply_rope(kv[t].data(), D, rope, double(t));
  }

  // Compressed entries and, per query, which of them it sees.
  std::vector<Vec> comp;
  std::vector<std::vector<int64_t>> visible(S);
  if (L.has_comp) {
    comp = run_compressor(L.comp, h, c.rope_compress, c.rms_eps);
    const int64_t T = int64_t(comp.size()), m = L.comp.m;
    if (!L.has_indexer) {
      for (int64_t t = 0; t < S; ++t)
        for (int64_t w = 0; w < std::min<int64_t>(T, (t + 1) / m); ++w) visible[t].push_back(w);
    } else {
      std::vector<Vec> keys = run_compressor(L.idx_comp, h, c.rope_compress, c.rms_eps);
      const int64_t nI = c.index_heads, dI = c.index_head_dim;
      for (int64_t t = 0; t < S; ++t) {
        Vec iq = matvec(L.idx_q_b, qr[t].data());
        for (int64_t hd = 0; hd < nI; ++hd) apply_rope(iq.data() + hd * dI, dI, c.rope_compress, double(t));
        Vec wgt = matvec(L.idx_w, h[t].data());
        Vec score(T, 0.0);
        for (int64_t w = 0; w < T; ++w)
          for (int64_t hd = 0; hd < nI; ++hd)
            score[w] += wgt[hd] / std::sqrt(double(nI)) *
                        std::max(0.0, dot(iq.data() + hd * dI, keys[w].data(), dI)) / std::sqrt(double(dI));
        visible[t] = select_entries(score, (t + 1) / m, c.index_topk);
      }
    }
  }

  const int64_t G = c.o_groups, R = c.o_lora, per_group = nH * D / G;
  std::vector<Vec> out(S);
  for (int64_t t = 0; t < S; ++t) {
    Vec heads(nH * D, 0.0);
    for (int64_t hd = 0; hd < nH; ++hd) {
      const double* qh = q[t].data() + hd * D;
      std::vector<const double*> vals;
      Vec logits;
      for (int64_t j = 0; j <= t; ++j) {
        if (c.sliding_window > 0 && j <= t - c.sliding_window) continue;
        vals.push_back(kv[j].data());
        logits.push_back(dot(qh, kv[j].data(), D) * scale);
      }
      for (int64_t w : visible[t]) {
        vals.push_back(comp[w].data());
        logits.push_back(dot(qh, comp[w].data(), D) * scale);
      }
      double mx = L.sinks[hd];
      for (double v : logits) mx = std::max(mx, v);
      double z = std::exp(L.sinks[hd] - mx);
      for (double v : logits) z += std::exp(v - mx);
      double* o = heads.data() + hd * D;
      for (size_t n = 0; n < vals.size(); ++n) {
        double p = std::exp(logits[n] - mx) / z;
        for (int64_t d = 0; d < D; ++d) o[d] += p * vals[n][d];
      }
      apply_rope(o, D, rope, double(t), -1.0);
    }
    Vec mid(G * R);
    for (int64_t g = 0; g < G; ++g) {
      Vec y = matvec(L.o_a, heads.data() + g * per_group, g * R, R);
      std::copy(y.begin(), y.end(), mid.begin() + g * R);
    }
    out[t] = matvec(L.o_b, mid.data());
  }
  return out;
}

// down (silu(min(g, limit)) * clamp(u, -limit, limit)) for one token's gate and up
// pre-activations g, u [I]; down [H, I] row-major. Routed and shared experts alike.
inline Vec clamped_swiglu(const Vec& g_in, const Vec& u_in, const double* down, int64_t H, int64_t I, double limit) {
  Vec act(I);
  for (int64_t i = 0; i < I; ++i) {
    double g = std::min(g_in[i], limit);
    double u = std::min(std::max(u_in[i], -limit), limit);
    act[i] = silu(g) * u;
  }
  Vec y(H);
  for (int64_t d = 0; d < H; ++d) y[d] = dot(down + d * I, act.data(), I);
  return y;
}

// MoE sublayer of one token x [H] (already post_attention_layernorm'ed).
inline Vec moe(const Config& c, const LayerW& L, const Vec& x, int64_t token) {
  const int64_t H = c.hidden, I = c.inter;
  Vec logits = matvec(L.gate, x.data());
  const int64_t* hash_row = L.mlp_type == "hash_moe" ? L.tid2eid.data() + token * c.top_k : nullptr;
  auto sel = route(logits, L.e_bias, c.top_k, c.routed_scaling, c.scoring_func, hash_row);
  Vec y(H, 0.0);
  const double* gu = L.gate_up.data_ptr<double>();
  const double* dn = L.down.data_ptr<double>();
  for (auto [e, w] : sel) {
    const double* W = gu + e * 2 * I * H;
    Vec g(I), u(I);
    for (int64_t i = 0; i < I; ++i) {
      g[i] = dot(W + i * H, x.data(), H);
      u[i] = dot(W + (I + i) * H, x.data(), H);
    }
    Vec ye = clamped_swiglu(g, u, dn + e * H * I, H, I, c.swiglu_limit);
    for (int64_t d = 0; d < H; ++d) y[d] += w * ye[d];
  }
  Vec ys = clamped_swiglu(matvec(L.sh_gate, x.data()), matvec(L.sh_up, x.data()), L.sh_down.p, H, I, c.swiglu_limit);
  for (int64_t d = 0; d < H; ++d) y[d] += ys[d];
  return y;
}

// Logits [S][V] of one row of token ids.
inline std::vector<Vec> forward_row(const Config& c, const ModelW& m, const std::vector<int64_t>& ids) {
  const int64_t S = int64_t(ids.size()), H = c.hidden, hc = c.hc;
  std::vector<Vec> X(S, Vec(hc * H));  // [S][hc*H]
  for (int64_t t = 0; t < S; ++t) {
    if (ids[t] < 0 || ids[t] >= c.vocab) throw std::invalid_argument("deepseek_v4 reference: token id out of range");
    for (int64_t n = 0; n < hc; ++n) std::copy(m.embed.row(ids[t]), m.embed.row(ids[t]) + H, X[t].begin() + n * H);
  }
  for (const LayerW& L : m.layers) {
    std::vector<HcWeights> w(S);
    std::vector<Vec> h(S);
    for (int64_t t = 0; t < S; ++t) {
      w[t] = hc_weights(X[t].data(), hc, H, L.attn_fn, L.attn_base, L.attn_scale, c.rms_eps, c.hc_eps,
                        c.sinkhorn_iters);
      Vec x = hc_collapse(X[t].data(), w[t].pre, H);
      h[t] = rms_norm(x.data(), H, L.in_norm.data(), c.rms_eps);
    }
    std::vector<Vec> a = attention(c, L, h);
    for (int64_t t = 0; t < S; ++t) hc_expand(X[t].data(), w[t], a[t].data(), H);
    for (int64_t t = 0; t < S; ++t) {
      HcWeights f =
          hc_weights(X[t].data(), hc, H, L.ffn_fn, L.ffn_base, L.ffn_scale, c.rms_eps, c.hc_eps, c.sinkhorn_iters);
      Vec x = hc_collapse(X[t].data(), f.pre, H);
      Vec y = moe(c, L, rms_norm(x.data(), H, L.post_norm.data(), c.rms_eps), ids[t]);
      hc_expand(X[t].data(), f, y.data(), H);
    }
  }
  std::vector<Vec> logits(S);
  for (int64_t t = 0; t < S; ++t) {
    Vec f = rms_norm(X[t].data(), hc * H, nullptr, c.rms_eps);
    Vec mix = matvec(m.head_fn, f.data());
    Vec pre(hc);
    for (int64_t n = 0; n < hc; ++n) pre[n] = sigmoid(mix[n] * m.head_scale[0] + m.head_base[n]) + c.hc_eps;
    Vec x = hc_collapse(X[t].data(), pre, H);
    Vec y = rms_norm(x.data(), H, m.norm.data(), c.rms_eps);
    logits[t] = matvec(m.lm_head, y.data());
  }
  return logits;
}

}  // namespace dsv4_ref

// Logits [B,S,V] float64 for input_ids [B,S] int64 (each row one sequence, positions 0..S-1).
// config: a Hugging Face deepseek_v4 config.json. weights: transformers' (v5) parameter names
// (with or without the "model." prefix) -> tensors of any floating dtype.
inline at::Tensor deepseek_v4_reference_logits(const nlohmann::json& config,
                                               const std::map<std::string, at::Tensor>& weights,
                                               const at::Tensor& input_ids) {
  using namespace dsv4_ref;
  if (input_ids.dim() != 2) throw std::invalid_argument("deepseek_v4 reference: input_ids must be [B,S]");
  const Config c = parse_config(config);
  const ModelW m = load_weights(c, weights);
  at::Tensor ids = input_ids.detach().to(at::kLong).contiguous();
  const int64_t B = ids.size(0), S = ids.size(1);
  at::Tensor out = at::empty({B, S, c.vocab}, at::TensorOptions().dtype(at::kDouble));
  double* o = out.data_ptr<double>();
  const int64_t* ip = ids.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> row(ip + b * S, ip + (b + 1) * S);
    std::vector<Vec> lg = forward_row(c, m, row);
    for (int64_t t = 0; t < S; ++t) std::copy(lg[t].begin(), lg[t].end(), o + (b * S + t) * c.vocab);
  }
  return out;
}

}  // namespace glint::testing
