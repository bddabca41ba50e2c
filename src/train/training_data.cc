// The trainer's setup beyond the model: reading every data file whole, choosing the
// sequence length and cutting to it with a report, what one epoch is, and the memory
// plan (the micro-batch and the estimate printed before step 1).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/lengths.h"
#include "data/text_dataset.h"
#include "data/tokenized_jsonl.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "generate/generation_defaults.h"
#include "parallel/fsdp.h"
#include "train/memory_estimate.h"
#include "train/trainer.h"

namespace glint {

namespace {

std::string grouped(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

}  // namespace

std::vector<Sample> Trainer::read_data(const std::string& path, int64_t vocab, int64_t* pad_id) {
  if (is_pretokenized_jsonl(path)) {
    std::vector<Sample> samples = read_tokenized_jsonl(path, vocab);
    report_.push_back(path + ": " + grouped(int64_t(samples.size())) + " pre-tokenized samples");
    return samples;
  }
  const std::string dir = opt_.data.tokenizer.empty() ? opt_.model.dir : opt_.data.tokenizer;
  GLINT_CHECK(!dir.empty(), path, " holds text (messages, prompt/completion or text lines); tokenizing it "
              "needs a tokenizer: --model DIR with tokenizer.json, or --tokenizer DIR");
  if (!text_tokenizer_) {  // one load for every text file of the run (tenants share it)
    text_tokenizer_ = std::make_unique<TextTokenizer>(TextTokenizer::load(dir));
    GLINT_CHECK(text_tokenizer_->tokenizer.vocab_size() <= vocab, dir, ": the tokenizer has ",
                text_tokenizer_->tokenizer.vocab_size(), " tokens but the model's vocab_size is ", vocab);
  }
  const TextTokenizer& text = *text_tokenizer_;
  *pad_id = std::max(text.pad_id, 0);
  TextDataOptions o;
  o.seq_len = 0;  // whole: the length is chosen from every file, then cut
  o.max_bad_lines = opt_.data.max_bad_lines;
  o.set_enable_thinking(opt_.data.enable_thinking);
  o.set_chat_date(opt_.data.chat_date);
  // The tokens `glint generate` stops at: an assistant turn trains the one that follows it.
  o.chat.stop_ids = model_stop_token_ids(opt_.model.dir, dir, &text.tokenizer);
  TextDataStats st;
  std::vector<Sample> samples =
      read_text_jsonl(path, text.tokenizer, text.chat ? &*text.chat : nullptr, text.eos_id, o, &st);
  std::string line = path + ": " + grouped(st.samples) + " samples from " + grouped(st.lines) + " lines";
  if (st.dropped > 0) line += ", " + grouped(st.dropped) + " with no token to train dropped";
  if (st.bad_lines > 0) line += ", " + grouped(st.bad_lines) + " bad lines skipped (first: " + st.first_bad + ")";
  report_.push_back(line);
  return samples;
}

std::vector<std::vector<Sample>> Trainer::load_data(const std::vector<std::string>& paths,
                                                    const std::vector<std::string>& eval_paths, int64_t vocab,
                                                    std::vector<std::vector<Sample>>* evals) {
  std::vector<std::vector<Sample>> sets;
  std::vector<std::string> all = paths;
  all.insert(all.end(), eval_paths.begin(), eval_paths.end());
  int64_t longest = 0, longest_line = 0;
  std::string longest_path;
  for (const std::string& path : all) {
    if (path.empty()) {
      sets.emplace_back();
      continue;
    }
    sets.push_back(read_data(path, vocab, &data_->collate.pad_id));
    int64_t line = 0, n = longest_sample(sets.back(), &line);
    if (n > longest) {
      longest = n;
      longest_line = line;
      longest_path = path;
    }
  }
  const std::string where = longest_path + (longest_line > 0 ? ":" + std::to_string(longest_line) : "");
  std::string line;
  const int64_t seq_len =
      choose_seq_len(opt_.data.seq_len, longest, where, model_->config.max_position_embeddings, &line);
  report_.push_back(line);
  data_->collate.seq_len = seq_len;
  for (size_t i = 0; i < sets.size(); ++i) {
    if (all[i].empty()) continue;
    const bool validation = i >= paths.size();
    LengthReport r = fit_to_length(&sets[i], seq_len);
    if (r.cut > 0) report_.push_back(all[i] + ": " + r.summary());
    if (r.lost > 0) report_.push_back(r.lost_warning(all[i]));
    GLINT_CHECK(!sets[i].empty(), all[i], ": no ", validation ? "validation " : "",
                "sample keeps a trained token within --seq-len ", seq_len, " (the longest has ", r.longest, " tokens)");
  }
  evals->assign(std::make_move_iterator(sets.begin() + int64_t(paths.size())), std::make_move_iterator(sets.end()));
  sets.resize(paths.size());
  return sets;
}

std::string Trainer::epoch_line(const std::string& what, const std::vector<Sample>& samples, int64_t steps,
                                int64_t batch) {
  int64_t tokens = 0, trained = 0;
  for (const Sample& s : samples) {
    tokens += int64_t(s.input_ids.size());
    for (size_t i = 1; i < s.labels.size(); ++i) trained += s.labels[i] != kIgnoreIndex;
  }
  const double epochs = double(steps) * double(batch) / double(samples.size());
  char buf[160];
  std::snprintf(buf, sizeof buf, epochs >= 10 ? "%.1f" : "%.3g", epochs);
  std::string line = what + ": one epoch = " + grouped(int64_t(samples.size())) +
                     (samples.size() == 1 ? " sample, " : " samples, ") + grouped(tokens) +
                     " tokens (" + grouped(trained) + " trained); " + grouped(steps) + (steps == 1 ? " step x " : " steps x ") +
                     grouped(batch) + " samples = " + buf + " epochs";
  if (epochs >= 20) line += " (each sample seen ~" + grouped(int64_t(epochs + 0.5)) + " times: watch for overfitting)";
  return line;
}

int64_t Trainer::steps_for_epochs(size_t samples, int64_t batch) const {
  GLINT_ASSERT(opt_.optim.epochs > 0 && batch > 0, "epochs ", opt_.optim.epochs, " batch ", batch);
  return std::max<int64_t>(1, int64_t(std::ceil(opt_.optim.epochs * double(samples) / double(batch) - 1e-9)));
}

MemoryEstimate Trainer::estimate_step_memory(int64_t rows, int64_t seq_len, int64_t micro_batches) {
  MemoryInputs in;
  in.weight_bytes = local_weight_bytes();
  for (const auto& p : trainable_parameters()) {
    in.gradient_bytes += int64_t(p.numel()) * int64_t(p.element_size());
    in.largest_gradient_numel = std::max(in.largest_gradient_numel, int64_t(p.numel()));
  }
  for (const auto& l : learners())
    for (const Sample& s : l->samples)
      in.data_bytes += int64_t(s.input_ids.size()) * 2 * int64_t(sizeof(int64_t)) + int64_t(sizeof(Sample));
  in.dtype_bytes = int64_t(c10::elementSize(model_->placement.dtype));
  in.rows = rows;
  in.seq_len = seq_len;
  in.micro_batches = micro_batches;
  in.recompute = opt_.parallel.fsdp || opt_.parallel.recompute;
  in.fsdp = opt_.parallel.fsdp;
  in.fsdp_overlap = fsdp_runner() && fsdp_runner()->overlaps();
  in.full = opt_.full;
  MemoryEstimate e;
  auto fn = [&] { e = estimate_memory(*model_, in); };
  if (FsdpRunner* f = fsdp_runner()) f->with_layer_shapes(fn);  // the layers hold shards
  else fn();
  return e;
}

DecodeEstimate Trainer::estimate_decoding_memory(const DecodeInputs& in) {
  DecodeEstimate e;
  auto fn = [&] { e = estimate_decode_memory(*model_, in); };
  if (FsdpRunner* f = fsdp_runner()) f->with_layer_shapes(fn);
  else fn();
  e.weights_mb = double(local_weight_bytes()) / (1 << 20);
  return e;
}

void Trainer::plan_memory() {
  const int W = comm_->size();
  const int64_t seq_len = data_->collate.seq_len;
  // Rows of one step on this rank: its share of the batch (of every tenant's batch).
  int64_t rows = 0;
  for (const auto& l : learners()) rows += l->batch_size / W;
  const double budget = memory_budget_mb(opt_.memory.budget, World::from_env().local_world_size);
  auto estimate = [&](int64_t mbs) { return estimate_step_memory(mbs, seq_len, rows / mbs); };
  const bool chosen_by_user = opt_.memory.micro_batch_size > 0;
  if (chosen_by_user) {
    micro_batch_size_ = opt_.memory.micro_batch_size;
  } else {
    // The largest micro-batch among the divisors of the rows (equal micro-batches) that
    // fits the budget and holds at most kMicroBatchTokens padded tokens: beyond that the
    // matmuls gain nothing, while padding (rows are as long as their longest) and memory
    // grow; samples of like length share a micro-batch (next_micro_batches).
    micro_batch_size_ = 1;
    for (int64_t m = rows; m >= 1; --m)
      if (rows % m == 0 && m * seq_len <= kMicroBatchTokens && (budget <= 0 || estimate(m).total_mb() <= budget)) {
        micro_batch_size_ = m;
        break;
      }
  }
  MemoryEstimate e = estimate(micro_batch_size_);
  std::string line = e.line(micro_batch_size_, seq_len);
  if (budget > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "; budget %.0f MB", budget);
    line += buf;
  }
  line += chosen_by_user ? " (--micro-batch-size)"
                         : " (micro-batch: the most sequences of at most " + std::to_string(kMicroBatchTokens) +
                               " tokens that fit the budget)";
  report_.push_back(line);
  // The ranks agree: one that refuses alone would leave the others waiting in a collective.
  at::Tensor over = at::tensor({budget > 0 && e.total_mb() > budget ? 1.0 : 0.0}, at::kDouble);
  if (W > 1) comm_->all_reduce_sum(over);
  if (over.item<double>() == 0) return;
  char numbers[160];
  std::snprintf(numbers, sizeof numbers, "the estimated peak memory per rank, %s MB, exceeds the budget of %s MB%s",
                grouped(int64_t(e.total_mb() + 0.5)).c_str(), grouped(int64_t(budget + 0.5)).c_str(), e.total_mb() > budget ? "" : " on another rank");
  std::string fixes = std::string(chosen_by_user ? "a smaller --micro-batch-size, " : "") +
                      (opt_.parallel.fsdp || opt_.parallel.recompute ? "" : "--activation-checkpointing, ") +
                      (opt_.parallel.fsdp || comm_->size() == 1 ? "" : "--fsdp, ") + "a shorter --seq-len (now " +
                      grouped(seq_len) + ") or more ranks would lower it";
  if (opt_.memory.ignore_estimate) {
    report_.push_back(std::string("warning: ") + numbers + " (--ignore-memory-estimate); " + fixes);
    return;
  }
  // Refused before the first step allocates: a plan that does not fit would end in an
  // allocation failure (or the kernel's OOM killer) minutes later.
  usage_fail(line, "\n", numbers, (chosen_by_user ? "" : " even at one sequence per micro-batch"), "; ", fixes,
             ". --memory-budget sets the budget; --ignore-memory-estimate starts anyway");
}

}  // namespace glint
