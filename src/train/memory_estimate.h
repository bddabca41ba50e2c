// Peak memory of one training rank, estimated before step 1 from the model's shape and
// the run's settings, and the micro-batch size chosen from a memory budget.
//
// Legend: T tokens in a micro-batch (rows x S), S sequence length, H hidden, V vocab.
#pragma once

#include <cstdint>
#include <string>

namespace glint {

class CausalLMImpl;

// What the estimate needs besides the model's shape.
struct MemoryInputs {
  int64_t weight_bytes = 0;     // held between steps: base weights (this rank's shards),
                                // adapters, optimizer moments
  int64_t gradient_bytes = 0;   // gradients of the trainable tensors this rank holds
  int64_t largest_gradient_numel = 0;  // elements of the largest of them
  int64_t micro_batches = 1;    // per step: from the second on, every gradient is there throughout
  int64_t data_bytes = 0;       // the tokenized data set in memory
  int64_t dtype_bytes = 4;      // activations' element size
  int64_t rows = 1;             // sequences per micro-batch
  int64_t seq_len = 128;        // S (an upper bound: batches are padded to their longest row)
  bool recompute = false;       // activation checkpointing or FSDP: layers recomputed
  bool fsdp = false;            // layers gathered one at a time, the root for the step
  bool fsdp_overlap = false;    // and the next layer gathered while one computes
  bool full = false;            // every weight trains; gathered layers get full-size gradients too
};

struct MemoryEstimate {
  double weights_mb = 0;      // weights, adapters, optimizer moments
  double gradients_mb = 0;    // trainable tensors' gradients live at the peak (after the
                              // backward: all of them and the optimizer's temporaries)
  double activations_mb = 0;  // saved for backward in one micro-batch, plus one layer's
                              // transient buffers (attention scores among them)
  double loss_mb = 0;         // the chunked loss: selected hidden rows and logit chunks
  double gathered_mb = 0;     // FSDP: the root unit and the largest gathered layer
  double data_mb = 0;         // the tokenized data
  double overhead_mb = 0;     // the process itself: libraries, allocator, buffers
  double total_mb() const;
  // "estimated peak 1,234 MB per rank = weights 300 + gradients 10 + activations 700
  // (micro-batch 8 x 512) + loss 100 + ... "
  std::string line(int64_t rows, int64_t seq_len) const;
};

// The default micro-batch holds at most this many padded tokens (rows x sequence length;
// one row when a row is longer): measured on CPU, 4 micro-batches of 8 rows x 440 tokens
// ran 1.25x the tokens/s of one of 32 rows, in half the memory (docs/BENCHMARKS.md).
constexpr int64_t kMicroBatchTokens = 4096;

// Bytes of the process before any model: measured ~200 MB for glint with libtorch on CPU.
constexpr double kProcessOverheadMb = 200;

// From what each layer's modules keep (DecoderLayerImpl::activation_memory) for the model
// as built and adapted for the run; its layers must have their shapes (under FSDP: inside
// FsdpRunner::with_layer_shapes).
MemoryEstimate estimate_memory(CausalLMImpl& model, const MemoryInputs& in);

// Decoding one batch (generate/generate.h: glint generate, the service's sampling): `rows`
// rows with room for `positions` positions each, the prompts prefilled together.
struct DecodeInputs {
  int64_t rows = 1;
  int64_t positions = 1;    // per row: the longest prompt + max_new_tokens (the cache's capacity)
  int64_t prompt = 1;       // the longest prompt: the prefill runs rows x prompt tokens
  int64_t dtype_bytes = 4;  // the model's dtype
  bool prompt_logprobs = false;  // each prompt's logits, a row at a time, in float64
};

struct DecodeEstimate {
  double weights_mb = 0;   // the model's parameters and buffers, its adapters among them
  double state_mb = 0;     // every row's decoding state (DecodeCache::bytes)
  double working_mb = 0;   // the largest forward's transient tensors and its logits
  double overhead_mb = 0;  // the process itself
  double total_mb() const;
  // "estimated peak 1,234 MB = weights 300 + decoding state 800 (4 rows x 2,048 positions)
  // + working 100 + process 200"
  std::string line(const DecodeInputs& in) const;
};

// One row's decoding state after `positions` positions, summed over the layers' attention
// modules (AttentionModule::decode_state_bytes; a module without a state of its own has
// its inputs kept, and the cache the row's token ids).
double decode_state_bytes_per_row(CausalLMImpl& model, int64_t positions, int64_t dtype_bytes);

// Peak memory of decoding the batch `in`: the state is allocated at the prefill for every
// position a row may reach, so the peak is the state plus the larger of the prefill's
// working set (one sublayer at a time: no gradients) and a decoding step's.
DecodeEstimate estimate_decode_memory(CausalLMImpl& model, const DecodeInputs& in);

// Parses a --memory-budget value: "24G", "24GB", "1500M", "1500MB", "1.5T"; a bare number
// is MiB. Returns MiB. Throws glint::UsageError naming the text.
double parse_memory_size(const std::string& text, const std::string& flag);

// The budget a --memory-budget value gives ("": 90% of the memory available to one of
// `local_ranks` processes, 0 when unknown), in MiB. Throws glint::UsageError as
// parse_memory_size does.
double memory_budget_mb(const std::string& value, int local_ranks);

// This machine's memory available to one of `local_ranks` processes: MemAvailable
// (/proc/meminfo) / local_ranks, in MiB (0 when unknown).
double available_memory_mb(int local_ranks);

}  // namespace glint
