// glint generate: text (or token ids) from a model directory, optionally with a LoRA
// adapter, printed as it is generated.
//
// The prompt is --prompt (a chat model's template wraps it as one user message, after an
// optional --system message), --messages (a JSON list of {"role", "content"}), or
// --prompt-ids (token ids, for a model without a tokenizer; ids are printed back).
// Generation stops at the model's EOS tokens (generate/generation_defaults.h:
// generation_config.json's eos_token_id, else config.json's, and the tokenizer's
// eos_token), any --stop-ids, or after --max-new-tokens. Sampling follows the flags, else
// the model's generation config as transformers reads it: greedy unless it sets do_sample.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/compat.h"
#include "core/cpu_threads.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"
#include "generate/generate.h"
#include "generate/generation_defaults.h"
#include "export/from_checkpoint.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "io/model_files.h"
#include "model/weights.h"
#include "parallel/parallelize.h"
#include "train/memory_estimate.h"

namespace glint::cli {

namespace {

struct GenerateArgs {
  std::string model, adapter, tenant, tokenizer;
  std::string prompt, messages, prompt_ids, system;
  bool raw = false;
  int64_t max_new_tokens = 256;
  double temperature = 0, top_p = 1;
  int64_t top_k = 0;
  // Whether each was given; if not, the model's generation config decides.
  bool temperature_given = false, top_k_given = false, top_p_given = false;
  uint64_t seed = 0;
  std::string stop_ids;
  std::string dtype = "float32", device = "cpu";
  int64_t threads = 0;
  std::string memory_budget;
  bool ignore_memory_estimate = false;
};

// "1 2 3" (spaces or commas) -> ids; `what` names the flag in errors.
std::vector<int64_t> parse_ids(const std::string& text, const std::string& what) {
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream in(spaced);
  std::vector<int64_t> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GLINT_USAGE_CHECK(used == word.size() && id >= 0, what, ": '", word, "' is not a token id (a number >= 0)");
    ids.push_back(id);
  }
  return ids;
}

// Prints the bytes of generated tokens as they come, holding back an incomplete UTF-8
// character until its last byte arrives; ill-formed bytes print as U+FFFD, as
// Tokenizer::decode reads them, so the whole output is the decoded text.
class Utf8Printer {
 public:
  void add(const std::string& bytes) {
    pending_ += bytes;
    size_t complete = complete_prefix(pending_);
    std::cout << utf8_lossy(std::string_view(pending_).substr(0, complete)) << std::flush;
    pending_.erase(0, complete);
  }
  void finish() {  // a character cut off at the end
    std::cout << utf8_lossy(pending_);
    pending_.clear();
  }

 private:
  // The longest prefix of s that does not end inside a UTF-8 character.
  static size_t complete_prefix(const std::string& s) {
    size_t start = s.size();
    for (int back = 0; back < 4 && start > 0; ++back) {
      unsigned char c = static_cast<unsigned char>(s[start - 1]);
      --start;
      if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII) at `start`
        size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return s.size() - start >= need ? s.size() : start;
      }
    }
    return s.size();  // only continuation bytes: ill-formed, passed on as they are
  }
  std::string pending_;
};

int run_generate(const GenerateArgs& a) {
  const int given = int(!a.prompt.empty()) + int(!a.messages.empty()) + int(!a.prompt_ids.empty());
  GLINT_USAGE_CHECK(given == 1, "glint generate needs exactly one of --prompt, --messages and --prompt-ids (got ", given,
                    ")");
  GLINT_USAGE_CHECK(a.system.empty() || !a.prompt.empty(), "--system goes with --prompt (put a system message into "
                    "the --messages file instead)");
  GLINT_USAGE_CHECK(!a.temperature_given || a.temperature >= 0, "--temperature must be >= 0 (0: greedy), got ",
                    a.temperature);
  GLINT_USAGE_CHECK(!a.top_k_given || a.top_k >= 0, "--top-k must be >= 0 (0: off), got ", a.top_k);
  GLINT_USAGE_CHECK(!a.top_p_given || (a.top_p > 0 && a.top_p <= 1), "--top-p must be in (0, 1] (1: off), got ",
                    a.top_p);
  const std::vector<int64_t> extra_stop_ids = parse_ids(a.stop_ids, "--stop-ids");
  compat::set_cpu_threads(cpu_threads_for(int(a.threads), 1));
  const c10::Device device = parse_device(a.device, "--device");
  const c10::ScalarType dtype = parse_dtype(a.dtype, "--dtype");
  GLINT_CHECK(path_exists(a.model), "--model ", a.model, ": no such directory");

  // The prompt's token ids.
  GenerationRequest request;
  std::unique_ptr<Tokenizer> tokenizer;
  const std::string tok_dir = a.tokenizer.empty() ? a.model : a.tokenizer;
  if (!a.prompt_ids.empty()) {
    request.prompt = parse_ids(a.prompt_ids, "--prompt-ids");
    GLINT_USAGE_CHECK(!request.prompt.empty(), "--prompt-ids: no token ids in '", a.prompt_ids, "'");
  } else {
    GLINT_CHECK(Tokenizer::found_in(tok_dir), tok_dir, ": no tokenizer.json (or tiktoken.model), which --prompt and "
                "--messages need (give --tokenizer DIR, or token ids with --prompt-ids)");
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(tok_dir));
    const bool chat = !a.raw && ChatTemplate::defined_in(tok_dir);
    GLINT_USAGE_CHECK(chat || a.messages.empty(), "--messages ", a.messages, ": ", tok_dir,
                      " defines no chat template to render them with", a.raw ? " (and --raw was given)" : "");
    GLINT_USAGE_CHECK(chat || a.system.empty(), "--system: ", tok_dir, " defines no chat template",
                      a.raw ? " (and --raw was given)" : "");
    std::vector<int32_t> ids;
    if (chat) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!a.messages.empty()) {
        GLINT_CHECK(path_exists(a.messages), "--messages ", a.messages, ": no such file");
        messages = nlohmann::ordered_json::parse(read_file(a.messages), nullptr, /*allow_exceptions=*/false);
        GLINT_CHECK(messages.is_array() && !messages.empty(), "--messages ", a.messages,
                    ": expected a non-empty JSON list of {\"role\", \"content\"} messages");
        for (size_t i = 0; i < messages.size(); ++i)
          GLINT_CHECK(messages[i].is_object() && messages[i].contains("role") && messages[i]["role"].is_string(),
                      "--messages ", a.messages, ": message ", i, " is not an object with a \"role\" string");
      } else {
        if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
        messages.push_back({{"role", "user"}, {"content", a.prompt}});
      }
      ChatRenderOptions render;
      render.add_generation_prompt = true;
      // The template writes the special tokens itself, as apply_chat_template does.
      ids = tokenizer->encode(ChatTemplate::load(tok_dir).render(messages, render), /*add_special_tokens=*/false);
    } else {
      ids = tokenizer->encode(a.prompt);
    }
    request.prompt.assign(ids.begin(), ids.end());
    GLINT_CHECK(!request.prompt.empty(), "the prompt encodes to no tokens");
  }

  // Sampling: the flags, else the model's generation config (greedy unless it sets
  // do_sample); the model's stop tokens whether the prompt came as text or as ids.
  const GenerationDefaults model_gen = read_generation_defaults(a.model, tok_dir, tokenizer.get());
  SamplingParams& sp = request.sampling;
  sp.max_new_tokens = a.max_new_tokens;
  sp.seed = a.seed;
  sp.temperature = a.temperature_given ? a.temperature : model_gen.do_sample ? model_gen.temperature : 0.0;
  sp.top_k = a.top_k_given ? a.top_k : model_gen.top_k;
  sp.top_p = a.top_p_given ? a.top_p : model_gen.top_p;
  sp.stop_token_ids = model_gen.stop_token_ids;
  sp.stop_token_ids.insert(sp.stop_token_ids.end(), extra_stop_ids.begin(), extra_stop_ids.end());
  sp.validate("glint generate (--max-new-tokens)");

  // Laid out as a training run lays it (parallel/parallelize.h), on one process: built
  // without its weights, which parallelize() reads.
  TensorPlacement lazy{dtype, device};
  lazy.lazy = true;
  CausalLM model(ModelConfig::from_file(a.model + "/config.json"), lazy);
  // Before any weight is read: whether the weights and the decoding state fit.
  DecodeInputs need;
  need.prompt = int64_t(request.prompt.size());
  need.positions = need.prompt + sp.max_new_tokens;
  need.dtype_bytes = int64_t(c10::elementSize(dtype));
  const DecodeEstimate estimate = estimate_decode_memory(*model, need);
  const double budget = memory_budget_mb(a.memory_budget, 1);
  if (budget > 0 && estimate.total_mb() > budget) {
    const std::string why = "the " + estimate.line(need) + " exceeds the budget of " +
                            std::to_string(int64_t(budget + 0.5)) + " MB; a smaller --max-new-tokens (now " +
                            std::to_string(sp.max_new_tokens) + ") or a shorter prompt (" + std::to_string(need.prompt) +
                            " tokens) would lower it";
    GLINT_CHECK(a.ignore_memory_estimate, why, " (--ignore-memory-estimate starts anyway)");
    std::cerr << "warning: " << why << "\n";
  }
  parallelize(*model, Comm::create(World{}, device), ParallelOptions{}, open_checkpoint(a.model, model->config).get());
  const int64_t vocab = model->config.vocab_size;
  for (size_t i = 0; i < request.prompt.size(); ++i)
    GLINT_CHECK(request.prompt[i] < vocab, a.prompt_ids.empty() ? "the prompt" : "--prompt-ids", ": token ", i,
                " is id ", request.prompt[i], ", but the model's vocabulary is [0, ", vocab, ") (", a.model,
                "/config.json vocab_size)");
  for (int64_t id : request.sampling.stop_token_ids)
    GLINT_CHECK(id < vocab, "stop token id ", id, " is outside the model's vocabulary [0, ", vocab, ")");
  if (!a.adapter.empty()) load_adapter_or_checkpoint(a.adapter, *model, a.tenant, "--adapter");
  model->eval();

  Utf8Printer printer;
  bool first = true;
  auto on_token = [&](size_t, int64_t token) {
    if (!tokenizer) {
      std::cout << (first ? "" : " ") << token << std::flush;
    } else {
      const auto& added = tokenizer->added_tokens();
      bool special = std::any_of(added.begin(), added.end(),
                                 [&](const AddedToken& t) { return t.id == token && t.special; });
      if (!special) printer.add(tokenizer->token_bytes(int32_t(token)));
    }
    first = false;
  };
  generate(*model, {request}, on_token);
  printer.finish();
  std::cout << "\n" << std::flush;
  return 0;
}

}  // namespace

Action add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = add_command(app, "generate");
  cmd->add_option("--model", a->model, "Hugging Face model directory (config.json and safetensors)")->required();
  cmd->add_option("--adapter", a->adapter,
                  "PEFT LoRA adapter directory to apply (e.g. a run's OUT/adapter), or a run's checkpoint: RUN (its "
                  "newest) or RUN/checkpoints/step-N");
  cmd->add_option("--tenant", a->tenant, "with a multi-tenant run's checkpoint as --adapter: whose adapter");
  cmd->add_option("--tokenizer", a->tokenizer, "directory holding tokenizer.json and its chat template (default: --model)");
  cmd->add_option("--prompt", a->prompt, "prompt text; with a chat template, the content of one user message");
  cmd->add_option("--messages", a->messages, "JSON file: a list of {\"role\", \"content\"} messages, rendered with "
                                             "the chat template (ending with the assistant's turn opened)");
  cmd->add_option("--prompt-ids", a->prompt_ids, "prompt as token ids, e.g. \"11 1 2 3 12\" (no tokenizer needed); "
                                                 "the generated ids are printed");
  cmd->add_option("--system", a->system, "a system message before the --prompt user message (chat models)");
  cmd->add_flag("--raw", a->raw, "encode --prompt as plain text, without the chat template");
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "tokens to generate at most")->capture_default_str();
  CLI::Option* temperature = cmd->add_option(
      "--temperature", a->temperature, "sampling temperature, >= 0; 0 is greedy. Default, as transformers: the "
      "model's generation_config.json (else config.json): its temperature (1.0 if unset) when it sets do_sample "
      "true, else greedy");
  CLI::Option* top_k = cmd->add_option("--top-k", a->top_k, "sample among the K most likely tokens; 0 is off "
                                                            "(default: the model's generation config's, else 50)");
  CLI::Option* top_p = cmd->add_option("--top-p", a->top_p, "nucleus sampling: among the fewest most likely tokens "
                                                            "holding mass P, in (0, 1]; 1 is off (default: the "
                                                            "model's generation config's, else 1)");
  cmd->add_option("--seed", a->seed, "random seed of the sampling")->capture_default_str();
  cmd->add_option("--stop-ids", a->stop_ids, "more token ids that end the generation, e.g. \"13\" (besides the "
                                             "model's EOS: generation_config.json's eos_token_id, else config.json's, "
                                             "and the tokenizer's eos_token)");
  cmd->add_option("--dtype", a->dtype, "float32, bfloat16, float16 or float64")->capture_default_str();
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads", a->threads, "intra-op CPU threads (0: OMP_NUM_THREADS if set, else all cores)")->capture_default_str();
  cmd->add_option("--memory-budget", a->memory_budget,
                  "memory the weights and the decoding state may take, e.g. 24G (default: 90% of what is available)");
  cmd->add_flag("--ignore-memory-estimate", a->ignore_memory_estimate,
                "start even when the estimated peak memory exceeds --memory-budget (refused otherwise)");
  return [a, temperature, top_k, top_p]() {
    a->temperature_given = temperature->count() > 0;
    a->top_k_given = top_k->count() > 0;
    a->top_p_given = top_p->count() > 0;
    return run_generate(*a);
  };
}

}  // namespace glint::cli
