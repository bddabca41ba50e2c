// Legend: B running requests, S positions, H hidden, V vocabulary.
#include "generate/generate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "core/error.h"
#include "lora/tenants.h"
#include "model/causal_lm.h"
#include "model/decode_cache.h"

namespace glint {

const char* stop_reason_name(StopReason r) { return r == StopReason::kStopToken ? "stop" : "length"; }

namespace {

// Rows of token ids as one right-padded batch: ids, positions 0.., segments 0 (-1 padding).
struct Padded {
  at::Tensor ids, pos, seg;  // [B,S] int64 on CPU
  at::Tensor last;           // [B] int64: each row's last position
};

Padded pad_rows(const std::vector<const std::vector<int64_t>*>& rows) {
  const int64_t B = int64_t(rows.size());
  int64_t S = 0;
  for (const auto* r : rows) S = std::max<int64_t>(S, int64_t(r->size()));
  Padded p{at::zeros({B, S}, at::kLong), at::zeros({B, S}, at::kLong), at::full({B, S}, -1, at::kLong),
           at::zeros({B}, at::kLong)};
  auto ids = p.ids.accessor<int64_t, 2>(), pos = p.pos.accessor<int64_t, 2>(), seg = p.seg.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t>& r = *rows[b];
    for (size_t i = 0; i < r.size(); ++i) {
      ids[b][i] = r[i];
      pos[b][i] = int64_t(i);
      seg[b][i] = 0;
    }
    p.last[b] = int64_t(r.size()) - 1;
  }
  return p;
}

// hidden [B,S,H] at each row's position last[b] -> [B,H].
at::Tensor at_rows(const at::Tensor& hidden, const at::Tensor& last) {
  const int64_t B = hidden.size(0), H = hidden.size(2);
  at::Tensor index = last.to(hidden.device()).view({B, 1, 1}).expand({B, 1, H});
  return hidden.gather(1, index).squeeze(1);
}

void check_request(const GenerationRequest& r, size_t n, int64_t vocab, const GenerateOptions& options) {
  const std::string where = "generation request " + std::to_string(n);
  GLINT_CHECK(!r.prompt.empty(), where, ": the prompt is empty (at least one token is needed)");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    GLINT_CHECK(r.prompt[i] >= 0 && r.prompt[i] < vocab, where, ": prompt token ", i, " is id ", r.prompt[i],
                ", outside the model's vocabulary [0, ", vocab, ")");
  r.sampling.validate(where);
  for (int64_t id : r.sampling.stop_token_ids)
    GLINT_CHECK(id < vocab, where, ": stop token id ", id, " is outside the model's vocabulary [0, ", vocab, ")");
  if (r.tenant_slot >= 0) {
    GLINT_CHECK(options.tenants != nullptr, where, ": names tenant slot ", r.tenant_slot,
                " but the generation has no tenant bank");
    GLINT_CHECK(r.tenant_slot < options.tenants->num_slots() && !options.tenants->list()[r.tenant_slot].empty(),
                where, ": tenant slot ", r.tenant_slot, " holds no tenant");
  } else {
    GLINT_CHECK(r.tenant_slot == -1, where, ": tenant_slot must be -1 or a slot, got ", r.tenant_slot);
  }
}

}  // namespace

std::vector<GenerationResult> generate(CausalLMImpl& model, const std::vector<GenerationRequest>& requests,
                                       const TokenCallback& on_token, const GenerateOptions& options) {
  const int64_t V = model.config.vocab_size;
  for (size_t n = 0; n < requests.size(); ++n) check_request(requests[n], n, V, options);
  std::vector<GenerationResult> results(requests.size());
  if (requests.empty()) return results;
  at::NoGradGuard no_grad;

  std::vector<TokenSampler> samplers;
  std::vector<std::vector<int64_t>> seqs;  // prompt + new tokens, per request
  std::vector<std::vector<at::Tensor>> kept_logits(requests.size());
  std::vector<size_t> running;  // request of each batch row
  int64_t capacity = 0;
  for (size_t n = 0; n < requests.size(); ++n) {
    samplers.emplace_back(requests[n].sampling);
    seqs.push_back(requests[n].prompt);
    running.push_back(n);
    capacity = std::max<int64_t>(capacity, int64_t(requests[n].prompt.size()) + requests[n].sampling.max_new_tokens);
  }
  auto route = [&] {  // the tenant of each batch row
    if (!options.tenants) return;
    std::vector<int64_t> slots;
    for (size_t n : running) slots.push_back(requests[n].tenant_slot);
    options.tenants->set_rows(at::tensor(slots, at::kLong));
  };
  std::unique_ptr<DecodeCache> cache;
  if (!options.recompute)
    cache = std::make_unique<DecodeCache>(int64_t(requests.size()), model.placement.device, capacity);

  // Prefill: every prompt at once.
  route();
  std::vector<const std::vector<int64_t>*> rows;
  for (size_t n : running) rows.push_back(&seqs[n]);
  Padded batch = pad_rows(rows);
  at::Tensor hidden = model.forward(batch.ids, batch.pos, batch.seg, cache.get()).hidden;  // [B,S,H]
  for (size_t b = 0; b < running.size(); ++b) {
    const GenerationRequest& r = requests[running[b]];
    if (!r.prompt_logprobs) continue;
    std::vector<double>& out = results[running[b]].prompt_logprobs;
    out.assign(r.prompt.size(), std::numeric_limits<double>::quiet_NaN());
    const int64_t n = int64_t(r.prompt.size());
    if (n < 2) continue;
    at::Tensor logp = at::log_softmax(model.logits(hidden[b].narrow(0, 0, n - 1)).to(at::kCPU, at::kDouble), -1);
    at::Tensor next = at::tensor(std::vector<int64_t>(r.prompt.begin() + 1, r.prompt.end()), at::kLong);
    at::Tensor picked = logp.gather(1, next.unsqueeze(1)).squeeze(1).contiguous();  // [n-1]
    std::copy_n(picked.data_ptr<double>(), n - 1, out.begin() + 1);
  }
  at::Tensor logits = model.logits(at_rows(hidden, batch.last));  // [B,V]

  while (true) {
    at::Tensor host = logits.to(at::kCPU, at::kDouble).contiguous();  // [B,V]
    at::Tensor logp = at::log_softmax(host, -1);
    std::vector<int64_t> still;  // batch rows that go on
    std::vector<int64_t> chosen(running.size(), -1);  // -1: the row is done (max_new_tokens 0)
    for (size_t b = 0; b < running.size(); ++b) {
      const size_t n = running[b];
      if (int64_t(results[n].tokens.size()) < requests[n].sampling.max_new_tokens)
        chosen[b] = samplers[n].choose(host[b].data_ptr<double>(), V);
    }
    if (options.agree) options.agree(chosen);
    for (size_t b = 0; b < running.size(); ++b) {
      const size_t n = running[b];
      GenerationResult& res = results[n];
      const SamplingParams& sp = requests[n].sampling;
      if (chosen[b] < 0) continue;
      const int64_t token = chosen[b];
      res.tokens.push_back(token);
      res.logprobs.push_back(logp[b][token].item<double>());
      if (options.keep_logits) kept_logits[n].push_back(host[b].clone());
      seqs[n].push_back(token);
      if (on_token) on_token(n, token);
      if (samplers[n].is_stop(res.tokens)) {
        res.stop = StopReason::kStopToken;
      } else if (int64_t(res.tokens.size()) < sp.max_new_tokens) {
        still.push_back(int64_t(b));
      }
    }
    if (still.empty()) break;
    if (still.size() != running.size()) {  // drop the finished rows
      std::vector<size_t> next;
      for (int64_t b : still) next.push_back(running[b]);
      running = std::move(next);
      if (cache) cache->keep_rows(still);
    }
    route();
    const int64_t B = int64_t(running.size());
    if (cache) {  // one new token per row
      at::Tensor ids = at::empty({B, 1}, at::kLong), pos = at::empty({B, 1}, at::kLong);
      for (int64_t b = 0; b < B; ++b) {
        ids[b][0] = seqs[running[b]].back();
        pos[b][0] = cache->lengths()[b];
      }
      logits = model.logits(model.forward(ids, pos, at::zeros({B, 1}, at::kLong), cache.get()).hidden.select(1, 0));
    } else {  // every running sequence again
      rows.clear();
      for (size_t n : running) rows.push_back(&seqs[n]);
      batch = pad_rows(rows);
      logits = model.logits(at_rows(model.forward(batch.ids, batch.pos, batch.seg).hidden, batch.last));
    }
  }
  if (options.keep_logits)
    for (size_t n = 0; n < requests.size(); ++n)
      results[n].logits = kept_logits[n].empty() ? at::zeros({0, V}, at::kDouble) : at::stack(kept_logits[n]);
  return results;
}

std::vector<std::vector<int64_t>> greedy_generate_recompute(CausalLMImpl& model,
                                                            const std::vector<std::vector<int64_t>>& prompts,
                                                            int64_t max_new, int64_t eos, int64_t pad) {
  at::NoGradGuard no_grad;
  int64_t B = prompts.size();
  std::vector<std::vector<int64_t>> seqs = prompts, out(B);
  std::vector<bool> done(B, false);
  for (int64_t t = 0; t < max_new; ++t) {
    int64_t S = 0;
    for (const auto& s : seqs) S = std::max<int64_t>(S, s.size());
    at::Tensor ids = at::full({B, S}, pad, at::kLong), pos = at::zeros({B, S}, at::kLong),
               seg = at::full({B, S}, -1, at::kLong);
    for (int64_t b = 0; b < B; ++b)
      for (size_t i = 0; i < seqs[b].size(); ++i) {
        ids[b][i] = seqs[b][i];
        pos[b][i] = int64_t(i);
        seg[b][i] = 0;
      }
    at::Tensor hidden = model.forward(ids, pos, seg).hidden;  // [B,S,H]
    at::Tensor last_pos = at::empty({B}, at::kLong);
    for (int64_t b = 0; b < B; ++b) last_pos[b] = int64_t(seqs[b].size()) - 1;
    at::Tensor last = at_rows(hidden, last_pos);  // [B,H]
    at::Tensor next = model.logits(last).argmax(-1).to(at::kCPU);
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      int64_t tok = next[b].item<int64_t>();
      out[b].push_back(tok);
      seqs[b].push_back(tok);
      if (tok == eos) done[b] = true;
      all_done &= done[b];
    }
    if (all_done) break;
  }
  return out;
}

}  // namespace glint
