"""The CPU peer's models: each family's forward written as plain eager PyTorch, in the
form its transformers modeling file takes on the CPU, with the LoRA step glint runs.

Every family shares one frame (Model): embedding -> layers (RMSNorm, attention, residual,
RMSNorm, MLP or MoE, residual) -> final norm -> lm_head -> cross-entropy of the next
tokens (mean over B x (S-1)). A family says what its attention, router and experts do:

- qwen3_moe: q/k/v/o, per-head q/k RMSNorm, RoPE rotate-half, GQA, causal
  scaled_dot_product_attention; softmax router, top-k, renormalised when norm_topk_prob.
- glm4_moe (GLM-4.5/4.6): q/k/v biases, RoPE on the first partial_rotary_factor of each
  head, optional q/k norms; the first first_k_dense_replace layers a dense SwiGLU MLP;
  sigmoid router with e_score_correction_bias for the choice (group-limited when
  n_group > 1), weights renormalised and times routed_scaling_factor; shared experts.
- gpt_oss: q/k/v/o biases, YaRN RoPE (its attention factor on cos and sin), one sink
  logit per head in the softmax (eager [B, N, S, S] scores, as transformers' eager path:
  sdpa has no sinks), sliding-window layers; router with a bias, softmax over the top-k
  logits; packed in-major experts with biases, gate and up interleaved, the clamped GLU
  (gate <= limit, |up| <= limit, gate sigmoid(1.702 gate) (up + 1)).
- deepseek_v3 (and kimi_k2): multi-head latent attention (q_a -> norm -> q_b; kv_a ->
  the latent norm -> kv_b; the RoPE part shared by the heads, its pairs de-interleaved;
  YaRN with the mscale correction on the softmax scale), group-limited sigmoid routing as
  GLM's, a dense first layer, shared experts.

The routed token copies are sorted by expert in one stable permutation; each expert runs
its GEMMs on its contiguous slice; the outputs are weighted and summed with index_add.

LoRA (r, alpha; scale alpha / r): A [r, in] ~ U(-1/sqrt(in), 1/sqrt(in)), B [out, r] = 0 on
each targeted linear (a target names a module path's last part, as PEFT's target_modules:
"gate_proj" adapts the dense MLP's and the shared experts'), applied as x A^T B^T; on the
packed experts one A [E, r, in] and one B [E, out, r] per tensor, two thin GEMMs per expert
on the same slices as glint runs them (no [E, out, in] delta). "all" is every linear and
both expert tensors (glint's default); the routers are not linears.
"""
import math
import sys

import torch
import torch.nn.functional as F

EXPERT_TARGETS = ("experts.gate_up_proj", "experts.down_proj")


def packed_experts(w, prefix, E, in_major):
    """gate_up and down of one layer's experts as stored packed, or packed here from the
    per-expert keys ([E, 2I, H] / [E, H, I]; in-major [E, H, 2I] / [E, I, H])."""
    if prefix + "gate_up_proj" in w:
        return w[prefix + "gate_up_proj"].contiguous(), w[prefix + "down_proj"].contiguous()
    gu = torch.stack([torch.cat([w[f"{prefix}{e}.gate_proj.weight"], w[f"{prefix}{e}.up_proj.weight"]], 0)
                      for e in range(E)])
    down = torch.stack([w[f"{prefix}{e}.down_proj.weight"] for e in range(E)])
    if in_major:
        gu, down = gu.transpose(1, 2).contiguous(), down.transpose(1, 2).contiguous()
    return gu, down


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def yarn_inv_freq(dim, theta, r):
    """YaRN's blend of the original and the stretched frequencies (float64)."""
    pos = theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    omax = r["original_max_position_embeddings"]

    def correction_dim(rot):
        return dim * math.log(omax / (rot * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(r.get("beta_fast", 32.0)), correction_dim(r.get("beta_slow", 1.0))
    if r.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0.0), min(high, dim - 1.0)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    return (1.0 / (r["factor"] * pos)) * ramp + (1.0 / pos) * (1 - ramp)


def yarn_mscale(factor, mscale=1.0):
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


class Model:
    """The base weights (frozen) and the LoRA tensors (trained). Subclasses: one family."""

    model_types = ()

    def __init__(self, cfg, w, a):
        self.c = c = cfg
        self.H = c["hidden_size"]
        self.eps = c["rms_norm_eps"]
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = w["lm_head.weight"] if "lm_head.weight" in w else self.embed
        self.scale = a.alpha / a.r
        self.r = a.r
        targets = set(a.targets.split(","))
        self.all_targets = "all" in targets
        self.targets = targets
        self.gen = torch.Generator().manual_seed(a.seed)
        self.lora = []  # [(name, tensor)]
        self.layers = []
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            L = {"in_norm": w[p + "input_layernorm.weight"], "post_norm": w[p + "post_attention_layernorm.weight"]}
            self.read_layer(l, L, w, p)
            for path in [k for k in L if k.endswith(".weight") and L[k].dim() == 2]:
                self.maybe_adapt(l, L, path[:-len(".weight")])
            self.layers.append(L)

    # ---- LoRA --------------------------------------------------------------------------
    def targeted(self, name):
        return self.all_targets or name in self.targets

    def new_A(self, shape, fan_in):
        bound = 1.0 / fan_in ** 0.5
        return (torch.rand(shape, generator=self.gen) * 2 * bound - bound).requires_grad_(True)

    def maybe_adapt(self, l, L, path):
        """A LoRA on the linear at `path` (its weight L[path + ".weight"] [out, in]) when a
        target names its last part; routers ("...gate" of a MoE) are never adapted."""
        short = path.split(".")[-1]
        if path in self.routers() or not self.targeted(short):
            return
        out_f, in_f = L[path + ".weight"].shape
        L[path + ".A"], L[path + ".B"] = self.new_A((self.r, in_f), in_f), torch.zeros((out_f, self.r), requires_grad=True)
        self.lora += [(f"{l}.{path}.A", L[path + ".A"]), (f"{l}.{path}.B", L[path + ".B"])]

    def adapt_experts(self, l, L, E, H, I):
        for key, name, in_f, out_f in (("gu", "experts.gate_up_proj", H, 2 * I), ("d", "experts.down_proj", I, H)):
            if self.targeted(name):
                L[key + "_A"] = self.new_A((E, self.r, in_f), in_f)
                L[key + "_B"] = torch.zeros((E, out_f, self.r), requires_grad=True)
                self.lora += [(f"{l}.{name}.A", L[key + "_A"]), (f"{l}.{name}.B", L[key + "_B"])]

    def routers(self):
        return ("mlp.gate", "mlp.router")

    # ---- pieces ------------------------------------------------------------------------
    def rms(self, x, w, eps=None):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + (self.eps if eps is None else eps)))

    def layer_norm(self, x, w):
        """The decoder's RMSNorms (layers, final); zero-centred families scale by 1 + w."""
        return self.rms(x, w)

    def linear(self, x, L, path):
        y = F.linear(x, L[path + ".weight"], L.get(path + ".bias"))
        if path + ".A" in L:
            y = y + F.linear(F.linear(x, L[path + ".A"]), L[path + ".B"]) * self.scale
        return y

    def dense_mlp(self, x, L, prefix):
        return self.linear(F.silu(self.linear(x, L, prefix + "gate_proj")) * self.linear(x, L, prefix + "up_proj"),
                           L, prefix + "down_proj")

    @staticmethod
    def rope_tables(S, inv_freq, factor=1.0):
        f = torch.arange(S, dtype=torch.float32).unsqueeze(-1) * inv_freq.float()  # [S, D/2]
        emb = torch.cat([f, f], -1)
        return emb.cos() * factor, emb.sin() * factor

    def experts(self, rows, counts, L):
        """The routed rows (sorted by expert) through their experts: [N, H]."""
        gu, down, I = L["gate_up"], L["down"], self.I
        outs = []
        for e, xe in enumerate(rows.split(counts, 0)):
            if xe.shape[0] == 0:
                continue
            h = xe @ gu[e].t()                                        # [n, 2I]
            if "gu_A" in L:
                h = h + (xe @ L["gu_A"][e].t()) @ L["gu_B"][e].t() * self.scale
            act = F.silu(h[:, :I]) * h[:, I:]                         # [n, I]
            y = act @ down[e].t()                                     # [n, H]
            if "d_A" in L:
                y = y + (act @ L["d_A"][e].t()) @ L["d_B"][e].t() * self.scale
            outs.append(y)
        return torch.cat(outs, 0)

    def moe(self, x, L):
        shape = x.shape
        x = x.reshape(-1, self.H)                                     # [T, H]
        experts, w = self.route(x, L)                                 # [T, K] ids, differentiable weights
        K = experts.shape[1]
        flat = experts.reshape(-1)                                    # [T*K]
        order = torch.sort(flat, stable=True).indices                 # one permutation
        token = torch.div(order, K, rounding_mode="floor")
        weight = w.reshape(-1).index_select(0, order)
        rows = x.index_select(0, token)                               # [T*K, H], grouped by expert
        counts = torch.bincount(flat, minlength=self.E).tolist()
        y = self.experts(rows, counts, L) * weight.unsqueeze(1)
        out = torch.zeros_like(x).index_add(0, token, y)
        if "mlp.shared_experts.gate_proj.weight" in L:
            out = out + self.dense_mlp(x, L, "mlp.shared_experts.")
        if "mlp.shared_expert.gate_proj.weight" in L:  # Qwen3-Next / Qwen3.5: one, gated
            out = out + torch.sigmoid(self.linear(x, L, "mlp.shared_expert_gate")) * \
                self.dense_mlp(x, L, "mlp.shared_expert.")
        return out.view(shape)

    def mlp(self, x, L):
        return self.moe(x, L) if "gate_up" in L else self.dense_mlp(x, L, "mlp.")

    def loss(self, ids):
        B, S = ids.shape
        rope = self.rope(S)
        h = F.embedding(ids, self.embed)
        for l, L in enumerate(self.layers):
            h = h + self.attention(self.layer_norm(h, L["in_norm"]), L, l, rope)
            h = h + self.mlp(self.layer_norm(h, L["post_norm"]), L)
        logits = F.linear(self.layer_norm(h, self.norm), self.lm_head)  # [B, S, V]
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))

    def describe(self):
        c = self.c
        return {"model_type": c["model_type"], "layers": c["num_hidden_layers"], "hidden": self.H,
                "experts": self.E, "top_k": self.K, "vocab": c["vocab_size"]}


def read_linears(L, w, p, names):
    for n in names:
        L[n + ".weight"] = w[p + n + ".weight"]
        if p + n + ".bias" in w:
            L[n + ".bias"] = w[p + n + ".bias"]


def gqa_sdpa(q, k, v, scale=None):
    rep = q.shape[1] // k.shape[1]
    if rep > 1:  # each KV head serves `rep` query heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def sigmoid_grouped_route(x, L, E, K, n_group, topk_group, norm, scaling):
    """DeepSeek-V3 / GLM routing: sigmoid scores; the choice adds e_score_correction_bias
    and keeps the topk_group best groups (a group scores its two best); the weights are
    the chosen scores, renormalised, times routed_scaling_factor."""
    scores = torch.sigmoid(F.linear(x.float(), L["router"]))       # [T, E]
    with torch.no_grad():
        choice = scores + L["router_bias"] if "router_bias" in L else scores.clone()
        if n_group > 1:
            T, per = choice.shape[0], E // n_group
            grouped = choice.view(T, n_group, per)
            kept = grouped.topk(min(2, per), -1).values.sum(-1).topk(topk_group, -1).indices
            mask = torch.zeros(T, n_group, dtype=torch.bool).scatter_(1, kept, True)
            choice = choice.masked_fill(~mask.unsqueeze(-1).expand(T, n_group, per).reshape(T, E), float("-inf"))
        experts = choice.topk(K, -1).indices
    w = scores.gather(1, experts)
    if norm:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return experts, w * scaling


class Qwen3Moe(Model):
    model_types = ("qwen3_moe",)

    def read_layer(self, l, L, w, p):
        c = self.c
        if c.get("mlp_only_layers") or c.get("decoder_sparse_step", 1) != 1:
            sys.exit("dense layers (mlp_only_layers, decoder_sparse_step) are not supported")
        self.E, self.K, self.I = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        self.heads, self.kv = c["num_attention_heads"], c["num_key_value_heads"]
        self.D = c.get("head_dim") or self.H // self.heads
        self.norm_topk = c.get("norm_topk_prob", False)
        read_linears(L, w, p, ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"])
        L["q_norm"], L["k_norm"] = w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]
        L["router"] = w[p + "mlp.gate.weight"]
        L["gate_up"], L["down"] = packed_experts(w, p + "mlp.experts.", self.E, in_major=False)
        self.adapt_experts(l, L, self.E, self.H, self.I)

    def rope(self, S):
        theta = self.c.get("rope_theta", 10000.0)
        return self.rope_tables(S, theta ** (-torch.arange(0, self.D, 2, dtype=torch.float64) / self.D))

    def attention(self, x, L, l, rope):
        B, S, _ = x.shape
        cos, sin = rope
        q = self.rms(self.linear(x, L, "self_attn.q_proj").view(B, S, self.heads, self.D), L["q_norm"]).transpose(1, 2)
        k = self.rms(self.linear(x, L, "self_attn.k_proj").view(B, S, self.kv, self.D), L["k_norm"]).transpose(1, 2)
        v = self.linear(x, L, "self_attn.v_proj").view(B, S, self.kv, self.D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        o = gqa_sdpa(q, k, v)                                         # [B, N, S, D]
        return self.linear(o.transpose(1, 2).reshape(B, S, self.heads * self.D), L, "self_attn.o_proj")

    def route(self, x, L):
        probs = torch.softmax(F.linear(x, L["router"]), -1)           # [T, E]
        with torch.no_grad():
            experts = torch.topk(probs, self.K, -1).indices           # [T, K]
        w = probs.gather(1, experts)                                  # differentiable
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        return experts, w

    def describe(self):
        return dict(super().describe(), heads=self.heads, kv_heads=self.kv, head_dim=self.D,
                    moe_intermediate=self.I)


class Glm4Moe(Qwen3Moe):
    model_types = ("glm4_moe",)

    def read_layer(self, l, L, w, p):
        c = self.c
        self.E, self.K, self.I = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        self.heads, self.kv = c["num_attention_heads"], c["num_key_value_heads"]
        self.D = c.get("head_dim") or self.H // self.heads
        self.rot = int(self.D * c.get("partial_rotary_factor", 0.5))
        read_linears(L, w, p, ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"])
        if c.get("use_qk_norm", False):
            L["q_norm"], L["k_norm"] = w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]
        self.read_mlp(l, L, w, p, dense_layers=c.get("first_k_dense_replace", 1))

    def read_mlp(self, l, L, w, p, dense_layers):
        """GLM's and DeepSeek-V3's MLP: a dense SwiGLU in the first dense_layers layers, else
        the router (with its correction bias), the routed experts and the shared experts."""
        if l < dense_layers:
            read_linears(L, w, p, ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"])
            return
        L["router"] = w[p + "mlp.gate.weight"]
        if p + "mlp.gate.e_score_correction_bias" in w:
            L["router_bias"] = w[p + "mlp.gate.e_score_correction_bias"]
        L["gate_up"], L["down"] = packed_experts(w, p + "mlp.experts.", self.E, in_major=False)
        if self.c.get("n_shared_experts", 0) > 0:
            read_linears(L, w, p, ["mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj",
                                   "mlp.shared_experts.down_proj"])
        self.adapt_experts(l, L, self.E, self.H, self.I)

    def rope(self, S):
        theta = self.c.get("rope_theta", 10000.0)
        return self.rope_tables(S, theta ** (-torch.arange(0, self.rot, 2, dtype=torch.float64) / self.rot))

    def attention(self, x, L, l, rope):
        B, S, _ = x.shape
        cos, sin = rope
        q = self.linear(x, L, "self_attn.q_proj").view(B, S, self.heads, self.D)
        k = self.linear(x, L, "self_attn.k_proj").view(B, S, self.kv, self.D)
        if "q_norm" in L:
            q, k = self.rms(q, L["q_norm"]), self.rms(k, L["k_norm"])
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.linear(x, L, "self_attn.v_proj").view(B, S, self.kv, self.D).transpose(1, 2)
        R = self.rot

        def rotary(t):
            t_rot, t_pass = t[..., :R], t[..., R:]
            return torch.cat([t_rot * cos + rotate_half(t_rot) * sin, t_pass], -1)

        o = gqa_sdpa(rotary(q), rotary(k), v)
        return self.linear(o.transpose(1, 2).reshape(B, S, self.heads * self.D), L, "self_attn.o_proj")

    def route(self, x, L):
        c = self.c
        return sigmoid_grouped_route(x, L, self.E, self.K, c.get("n_group", 1), c.get("topk_group", 1),
                                     c.get("norm_topk_prob", True), c.get("routed_scaling_factor", 1.0))


class GptOss(Qwen3Moe):
    model_types = ("gpt_oss",)

    def read_layer(self, l, L, w, p):
        c = self.c
        self.E, self.K, self.I = c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"]
        self.heads, self.kv = c["num_attention_heads"], c["num_key_value_heads"]
        self.D = c.get("head_dim") or self.H // self.heads
        self.limit, self.alpha = c.get("swiglu_limit", 7.0), 1.702
        read_linears(L, w, p, ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"])
        L["sinks"] = w[p + "self_attn.sinks"]
        L["window"] = c["sliding_window"] if c["layer_types"][l] == "sliding_attention" else 0
        L["router"], L["router_b"] = w[p + "mlp.router.weight"], w[p + "mlp.router.bias"]
        L["gate_up"], L["down"] = packed_experts(w, p + "mlp.experts.", self.E, in_major=True)  # [E,H,2I], [E,I,H]
        L["gate_up_b"], L["down_b"] = w[p + "mlp.experts.gate_up_proj_bias"], w[p + "mlp.experts.down_proj_bias"]
        self.adapt_experts(l, L, self.E, self.H, self.I)

    def rope(self, S):
        c = self.c
        r = c.get("rope_scaling")
        theta = c.get("rope_theta", 10000.0)
        if not r:
            return self.rope_tables(S, theta ** (-torch.arange(0, self.D, 2, dtype=torch.float64) / self.D))
        factor = r.get("attention_factor") or yarn_mscale(r["factor"])
        return self.rope_tables(S, yarn_inv_freq(self.D, theta, r), factor)

    def attention(self, x, L, l, rope):
        B, S, _ = x.shape
        cos, sin = rope
        q = self.linear(x, L, "self_attn.q_proj").view(B, S, self.heads, self.D).transpose(1, 2)
        k = self.linear(x, L, "self_attn.k_proj").view(B, S, self.kv, self.D).transpose(1, 2)
        v = self.linear(x, L, "self_attn.v_proj").view(B, S, self.kv, self.D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        scores = (q @ k.transpose(-1, -2)) * self.D ** -0.5               # [B, N, S, S]
        i = torch.arange(S).unsqueeze(1)
        j = torch.arange(S).unsqueeze(0)
        hidden = j > i
        if L["window"]:
            hidden = hidden | (i - j >= L["window"])
        scores = scores.masked_fill(hidden, float("-inf"))
        sinks = L["sinks"].view(1, -1, 1, 1).expand(B, -1, S, 1)
        logits = torch.cat([scores, sinks], -1)
        logits = logits - logits.max(-1, keepdim=True).values
        probs = torch.softmax(logits, -1)[..., :-1]
        o = probs @ v
        return self.linear(o.transpose(1, 2).reshape(B, S, self.heads * self.D), L, "self_attn.o_proj")

    def route(self, x, L):
        probs = torch.softmax(F.linear(x, L["router"], L["router_b"]), -1)
        with torch.no_grad():
            experts = torch.topk(probs, self.K, -1).indices
        w = probs.gather(1, experts)
        return experts, w / w.sum(-1, keepdim=True)

    def experts(self, rows, counts, L):
        gu, down = L["gate_up"], L["down"]
        outs = []
        for e, xe in enumerate(rows.split(counts, 0)):
            if xe.shape[0] == 0:
                continue
            h = xe @ gu[e] + L["gate_up_b"][e]                        # [n, 2I]
            if "gu_A" in L:
                h = h + (xe @ L["gu_A"][e].t()) @ L["gu_B"][e].t() * self.scale
            gate, up = h[:, 0::2].clamp(max=self.limit), h[:, 1::2].clamp(-self.limit, self.limit)
            act = (up + 1) * (gate * torch.sigmoid(gate * self.alpha))
            y = act @ down[e] + L["down_b"][e]                         # [n, H]
            if "d_A" in L:
                y = y + (act @ L["d_A"][e].t()) @ L["d_B"][e].t() * self.scale
            outs.append(y)
        return torch.cat(outs, 0)


class DeepseekV3(Glm4Moe):
    model_types = ("deepseek_v3", "kimi_k2")

    def read_layer(self, l, L, w, p):
        c = self.c
        self.E, self.K, self.I = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        self.heads = c["num_attention_heads"]
        self.nope, self.rope_dim, self.vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.C = c["kv_lora_rank"]
        names = ["self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj", "self_attn.o_proj"]
        names += ["self_attn.q_a_proj", "self_attn.q_b_proj"] if c.get("q_lora_rank") else ["self_attn.q_proj"]
        read_linears(L, w, p, names)
        if c.get("q_lora_rank"):
            L["q_a_norm"] = w[p + "self_attn.q_a_layernorm.weight"]
        L["kv_a_norm"] = w[p + "self_attn.kv_a_layernorm.weight"]
        self.read_mlp(l, L, w, p, dense_layers=c.get("first_k_dense_replace", 0))

    def rope(self, S):
        c = self.c
        r, theta, R = c.get("rope_scaling"), c.get("rope_theta", 10000.0), self.rope_dim
        self.softmax_scale = (self.nope + R) ** -0.5
        if not r:
            return self.rope_tables(S, theta ** (-torch.arange(0, R, 2, dtype=torch.float64) / R))
        if r.get("mscale_all_dim"):
            self.softmax_scale *= yarn_mscale(r["factor"], r["mscale_all_dim"]) ** 2
        factor = (yarn_mscale(r["factor"], r["mscale"]) / yarn_mscale(r["factor"], r["mscale_all_dim"])
                  if r.get("mscale") and r.get("mscale_all_dim") else yarn_mscale(r["factor"]))
        return self.rope_tables(S, yarn_inv_freq(R, theta, r), factor)

    def attention(self, x, L, l, rope):
        B, S, _ = x.shape
        N, Dn, R, Dv = self.heads, self.nope, self.rope_dim, self.vd
        cos, sin = rope
        if "self_attn.q_a_proj.weight" in L:
            q = self.linear(self.rms(self.linear(x, L, "self_attn.q_a_proj"), L["q_a_norm"], 1e-6), L, "self_attn.q_b_proj")
        else:
            q = self.linear(x, L, "self_attn.q_proj")
        q = q.view(B, S, N, Dn + R).transpose(1, 2)
        q_nope, q_rot = q.split([Dn, R], -1)
        kv = self.linear(x, L, "self_attn.kv_a_proj_with_mqa")
        latent, k_rot = kv.split([self.C, R], -1)
        k_rot = k_rot.unsqueeze(1)                                    # [B, 1, S, R]
        if self.c.get("rope_interleave", True):                       # pairs (x0, x1) -> halves
            q_rot = q_rot.reshape(B, N, S, R // 2, 2).transpose(-1, -2).reshape(B, N, S, R)
            k_rot = k_rot.reshape(B, 1, S, R // 2, 2).transpose(-1, -2).reshape(B, 1, S, R)
        q_rot, k_rot = q_rot * cos + rotate_half(q_rot) * sin, k_rot * cos + rotate_half(k_rot) * sin
        kvh = self.linear(self.rms(latent, L["kv_a_norm"], 1e-6), L, "self_attn.kv_b_proj")
        k_nope, v = kvh.view(B, S, N, Dn + Dv).transpose(1, 2).split([Dn, Dv], -1)
        q = torch.cat([q_nope, q_rot], -1)
        k = torch.cat([k_nope, k_rot.expand(B, N, S, R)], -1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
        return self.linear(o.transpose(1, 2).reshape(B, S, N * Dv), L, "self_attn.o_proj")

    def describe(self):
        return dict(Model.describe(self), heads=self.heads, kv_lora_rank=self.C, moe_intermediate=self.I)


def chunk_gated_delta_rule(q, k, v, g, beta, chunk=64):
    """The gated delta rule over chunks, as transformers' torch_chunk_gated_delta_rule
    computes it: q, k [B, S, H, Dk] (L2-normalised, q scaled), v [B, S, H, Dv], g (log
    decay) and beta [B, S, H]; returns [B, S, H, Dv]. Inside a chunk the rule's
    triangular system is solved row by row (a Python loop over the chunk's rows), across
    chunks the state [B, H, Dk, Dv] is carried."""
    B, S, H, Dk = k.shape
    Dv = v.shape[-1]
    q, k, v, g, beta = [t.transpose(1, 2).contiguous().float() for t in (q, k, v, g, beta)]
    pad = (chunk - S % chunk) % chunk
    if pad:
        q, k, v = [F.pad(t, (0, 0, 0, pad)) for t in (q, k, v)]
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (S + pad) // chunk
    v_beta, k_beta = v * beta.unsqueeze(-1), k * beta.unsqueeze(-1)
    q, k, v, k_beta, v_beta = [t.reshape(B, H, n, chunk, t.shape[-1]) for t in (q, k, v, k_beta, v_beta)]
    g = g.reshape(B, H, n, chunk).cumsum(-1)
    decay = (g.unsqueeze(-1) - g.unsqueeze(-2)).tril().exp().tril()           # [B, H, n, C, C]
    upper = torch.triu(torch.ones(chunk, chunk, dtype=torch.bool), 0)
    attn = -((k_beta @ k.transpose(-1, -2)) * decay).masked_fill(upper, 0)
    for i in range(1, chunk):
        row, sub = attn[..., i, :i].clone(), attn[..., :i, :i].clone()
        attn[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
    attn = attn + torch.eye(chunk)
    value = attn @ v_beta
    k_cumdecay = attn @ (k_beta * g.exp().unsqueeze(-1))
    state = torch.zeros(B, H, Dk, Dv)
    strict = torch.triu(torch.ones(chunk, chunk, dtype=torch.bool), 1)
    outs = []
    for i in range(n):
        q_i, k_i, v_i = q[:, :, i], k[:, :, i], value[:, :, i]
        a_i = (q_i @ k_i.transpose(-1, -2) * decay[:, :, i]).masked_fill(strict, 0)
        v_new = v_i - k_cumdecay[:, :, i] @ state
        outs.append((q_i * g[:, :, i, :, None].exp()) @ state + a_i @ v_new)
        state = state * g[:, :, i, -1, None, None].exp() + \
            (k_i * (g[:, :, i, -1, None] - g[:, :, i]).exp()[..., None]).transpose(-1, -2) @ v_new
    o = torch.stack(outs, 2).reshape(B, H, n * chunk, Dv)[:, :, :S]
    return o.transpose(1, 2)


class Qwen3Next(Qwen3Moe):
    """Qwen3-Next and Qwen3.5-MoE: Gated DeltaNet layers (fused in_proj_qkvz / in_proj_ba
    in Qwen3-Next, in_proj_qkv / z / b / a in Qwen3.5; a causal depthwise convolution and
    SiLU; q, k L2-normalised; the chunked delta rule; the output RMSNorm gated by
    SiLU(z)) and gated attention layers (q_proj doubled for a per-head sigmoid gate on the
    output, zero-centred q/k norms, RoPE on the first partial_rotary_factor of each head);
    zero-centred RMSNorms (1 + w); softmax routing, renormalised; a shared expert scaled by
    sigmoid(shared_expert_gate(x))."""

    model_types = ("qwen3_next", "qwen3_5_moe_text", "qwen3_5_moe")

    def read_layer(self, l, L, w, p):
        c = self.c
        if c.get("mlp_only_layers") or c.get("decoder_sparse_step", 1) != 1:
            sys.exit("dense layers (mlp_only_layers, decoder_sparse_step) are not supported")
        self.E, self.K, self.I = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        self.heads, self.kv, self.D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        # Qwen3.5's router always renormalises; Qwen3-Next's by default.
        self.norm_topk = c["model_type"] != "qwen3_next" or c.get("norm_topk_prob", True)
        rope = c.get("rope_parameters") or {}
        self.theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        self.rot = int(self.D * rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.25)))
        self.Hk, self.Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.Dk, self.Dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        if c["layer_types"][l] == "linear_attention":
            a = p + "linear_attn."
            fused = a + "in_proj_qkvz.weight" in w
            names = ["in_proj_qkvz", "in_proj_ba"] if fused else ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"]
            read_linears(L, w, p, ["linear_attn." + n for n in names + ["out_proj"]])
            L["conv"], L["A_log"], L["dt_bias"] = w[a + "conv1d.weight"], w[a + "A_log"], w[a + "dt_bias"]
            L["delta_norm"] = w[a + "norm.weight"]
        else:
            read_linears(L, w, p, ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"])
            L["q_norm"], L["k_norm"] = w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]
        L["router"] = w[p + "mlp.gate.weight"]
        L["gate_up"], L["down"] = packed_experts(w, p + "mlp.experts.", self.E, in_major=False)
        read_linears(L, w, p, ["mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
                               "mlp.shared_expert.down_proj", "mlp.shared_expert_gate"])
        self.adapt_experts(l, L, self.E, self.H, self.I)

    def layer_norm(self, x, w):
        return (1 + w) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, S):
        return self.rope_tables(S, self.theta ** (-torch.arange(0, self.rot, 2, dtype=torch.float64) / self.rot))

    def attention(self, x, L, l, rope):
        return self.delta_net(x, L) if "conv" in L else self.gated_attention(x, L, rope)

    def gated_attention(self, x, L, rope):
        B, S, _ = x.shape
        cos, sin = rope
        N, D, R = self.heads, self.D, self.rot
        q, gate = self.linear(x, L, "self_attn.q_proj").view(B, S, N, 2 * D).split(D, -1)
        q = self.layer_norm(q, L["q_norm"]).transpose(1, 2)
        k = self.layer_norm(self.linear(x, L, "self_attn.k_proj").view(B, S, self.kv, D), L["k_norm"]).transpose(1, 2)
        v = self.linear(x, L, "self_attn.v_proj").view(B, S, self.kv, D).transpose(1, 2)

        def rotary(t):
            t_rot, t_pass = t[..., :R], t[..., R:]
            return torch.cat([t_rot * cos + rotate_half(t_rot) * sin, t_pass], -1)

        o = gqa_sdpa(rotary(q), rotary(k), v).transpose(1, 2).reshape(B, S, N * D)
        return self.linear(o * torch.sigmoid(gate.reshape(B, S, N * D)), L, "self_attn.o_proj")

    def delta_net(self, x, L):
        B, S, _ = x.shape
        Hk, Hv, Dk, Dv = self.Hk, self.Hv, self.Dk, self.Dv
        r = Hv // Hk
        if "linear_attn.in_proj_qkvz.weight" in L:  # per key head [q | k | v (r heads) | z (r heads)], [b (r) | a (r)]
            qq, kk, vv, z = self.linear(x, L, "linear_attn.in_proj_qkvz").view(B, S, Hk, 2 * Dk + 2 * r * Dv) \
                .split([Dk, Dk, r * Dv, r * Dv], -1)
            qkv = torch.cat([qq.reshape(B, S, -1), kk.reshape(B, S, -1), vv.reshape(B, S, -1)], -1)
            b, a = self.linear(x, L, "linear_attn.in_proj_ba").view(B, S, Hk, 2 * r).split(r, -1)
            z, b, a = z.reshape(B, S, Hv, Dv), b.reshape(B, S, Hv), a.reshape(B, S, Hv)
        else:
            qkv = self.linear(x, L, "linear_attn.in_proj_qkv")
            z = self.linear(x, L, "linear_attn.in_proj_z").view(B, S, Hv, Dv)
            b, a = self.linear(x, L, "linear_attn.in_proj_b"), self.linear(x, L, "linear_attn.in_proj_a")
        C, W = L["conv"].shape[0], L["conv"].shape[-1]
        mixed = F.silu(F.conv1d(qkv.transpose(1, 2), L["conv"], padding=W - 1, groups=C)[..., :S]).transpose(1, 2)
        q, k, v = mixed.split([Hk * Dk, Hk * Dk, Hv * Dv], -1)

        def l2(t):
            return t * torch.rsqrt(t.pow(2).sum(-1, keepdim=True) + 1e-6)

        q = l2(q.reshape(B, S, Hk, Dk)) * Dk ** -0.5
        k = l2(k.reshape(B, S, Hk, Dk))
        if r > 1:
            q, k = q.repeat_interleave(r, 2), k.repeat_interleave(r, 2)
        beta = torch.sigmoid(b)
        g = -L["A_log"].exp() * F.softplus(a + L["dt_bias"])
        o = chunk_gated_delta_rule(q, k, v.reshape(B, S, Hv, Dv), g, beta)       # [B, S, Hv, Dv]
        gated = self.rms(o, L["delta_norm"]) * F.silu(z)
        return self.linear(gated.reshape(B, S, Hv * Dv), L, "linear_attn.out_proj")


FAMILIES = {t: cls for cls in (Qwen3Moe, Glm4Moe, GptOss, DeepseekV3, Qwen3Next) for t in cls.model_types}


def build(cfg, w, a):
    cls = FAMILIES.get(cfg.get("model_type"))
    if cls is None:
        sys.exit(f"model_type {cfg.get('model_type')!r}: this peer does {', '.join(sorted(FAMILIES))}")
    return cls(cfg, w, a)
