// glint generate: text (or token ids) from a model directory, optionally with a LoRA
// adapter, printed as it is generated.
//
// The prompt is --prompt (a chat model's template wraps it as one user message, after an
// optional --system message), --messages (a JSON list of {"role", "content"}), or
// --prompt-ids (token ids, for a model without a tokenizer; ids are printed back).
// Generation stops at generation_config.json's eos_token_id, the tokenizer's eos_token,
// any --stop-ids, or after --max-new-tokens.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/compat.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "data/unicode_text.h"
#include "generate/generate.h"
#include "lora/peft_io.h"
#include "model/weights.h"

namespace glint::cli {

namespace {

struct GenerateArgs {
  std::string model, adapter, tokenizer;
  std::string prompt, messages, prompt_ids, system;
  bool raw = false;
  int64_t max_new_tokens = 256;
  double temperature = -1, top_p = -1;  // -1: generation_config.json's, else the default
  int64_t top_k = -1;
  uint64_t seed = 0;
  std::string stop_ids;
  std::string dtype = "float32", device = "cpu";
  int64_t threads = 0;
};

constexpr double kDefaultTemperature = 0.7;

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

// The ids of generation_config.json's eos_token_id (an int or a list), if any.
std::vector<int64_t> config_stop_ids(const nlohmann::json& gen, const std::string& where) {
  std::vector<int64_t> out;
  if (!gen.contains("eos_token_id") || gen["eos_token_id"].is_null()) return out;
  const nlohmann::json& e = gen["eos_token_id"];
  for (const auto& v : e.is_array() ? e : nlohmann::json::array({e})) {
    GLINT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, where, ": eos_token_id must be a token id or a list "
                "of them, found ", e.dump());
    out.push_back(v.get<int64_t>());
  }
  return out;
}

int run_generate(const GenerateArgs& a) {
  const int given = int(!a.prompt.empty()) + int(!a.messages.empty()) + int(!a.prompt_ids.empty());
  GLINT_USAGE_CHECK(given == 1, "glint generate needs exactly one of --prompt, --messages and --prompt-ids (got ", given,
                    ")");
  GLINT_USAGE_CHECK(a.system.empty() || !a.prompt.empty(), "--system goes with --prompt (put a system message into "
                    "the --messages file instead)");
  compat::set_cpu_threads(a.threads > 0 ? int(a.threads) : int(std::max(1u, std::thread::hardware_concurrency())));
  const c10::Device device = parse_device(a.device, "--device");
  const c10::ScalarType dtype = parse_dtype(a.dtype, "--dtype");
  GLINT_CHECK(path_exists(a.model), "--model ", a.model, ": no such directory");

  // Sampling: flags, else generation_config.json, else the defaults.
  SamplingParams sp;
  sp.max_new_tokens = a.max_new_tokens;
  sp.seed = a.seed;
  sp.temperature = kDefaultTemperature;
  const std::string gen_path = a.model + "/generation_config.json";
  if (path_exists(gen_path)) {
    nlohmann::json gen = read_json_file(gen_path);
    GLINT_CHECK(gen.is_object(), gen_path, ": expected a JSON object");
    sp.stop_token_ids = config_stop_ids(gen, gen_path);
    if (gen.value("temperature", nlohmann::json()).is_number()) sp.temperature = gen["temperature"].get<double>();
    if (gen.value("top_p", nlohmann::json()).is_number()) sp.top_p = gen["top_p"].get<double>();
    if (gen.value("top_k", nlohmann::json()).is_number_integer()) sp.top_k = gen["top_k"].get<int64_t>();
    if (gen.value("do_sample", nlohmann::json(true)) == false) sp.temperature = 0;
  }
  if (a.temperature >= 0) sp.temperature = a.temperature;
  if (a.top_p >= 0) sp.top_p = a.top_p;
  if (a.top_k >= 0) sp.top_k = a.top_k;
  for (int64_t id : parse_ids(a.stop_ids, "--stop-ids")) sp.stop_token_ids.push_back(id);
  sp.validate("glint generate (--max-new-tokens, --temperature, --top-k, --top-p)");

  // The prompt's token ids.
  GenerationRequest request;
  std::unique_ptr<Tokenizer> tokenizer;
  const std::string tok_dir = a.tokenizer.empty() ? a.model : a.tokenizer;
  if (!a.prompt_ids.empty()) {
    request.prompt = parse_ids(a.prompt_ids, "--prompt-ids");
    GLINT_USAGE_CHECK(!request.prompt.empty(), "--prompt-ids: no token ids in '", a.prompt_ids, "'");
  } else {
    GLINT_CHECK(path_exists(tok_dir + "/tokenizer.json"), tok_dir, ": no tokenizer.json, which --prompt and "
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
    auto specials = ChatTemplate::special_tokens_in(tok_dir);
    if (auto it = specials.find("eos_token"); it != specials.end())
      if (int32_t eos = tokenizer->token_to_id(it->second); eos >= 0) sp.stop_token_ids.push_back(eos);
  }
  request.sampling = sp;

  CausalLM model = from_pretrained(a.model, TensorPlacement{dtype, device});
  const int64_t vocab = model->config.vocab_size;
  for (size_t i = 0; i < request.prompt.size(); ++i)
    GLINT_CHECK(request.prompt[i] < vocab, a.prompt_ids.empty() ? "the prompt" : "--prompt-ids", ": token ", i,
                " is id ", request.prompt[i], ", but the model's vocabulary is [0, ", vocab, ") (", a.model,
                "/config.json vocab_size)");
  for (int64_t id : request.sampling.stop_token_ids)
    GLINT_CHECK(id < vocab, "stop token id ", id, " is outside the model's vocabulary [0, ", vocab, ")");
  if (!a.adapter.empty()) {
    GLINT_CHECK(path_exists(a.adapter + "/adapter_config.json"), "--adapter ", a.adapter,
                ": no adapter_config.json (is this a PEFT adapter directory?)");
    try {
      load_adapter(a.adapter, *model);
    } catch (const Error& e) {
      fail("--adapter ", a.adapter, " does not fit the model in ", a.model, ": ", e.what());
    }
  }
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
  cmd->add_option("--adapter", a->adapter, "PEFT LoRA adapter directory to apply (e.g. a run's OUT/adapter)");
  cmd->add_option("--tokenizer", a->tokenizer, "directory holding tokenizer.json and its chat template (default: --model)");
  cmd->add_option("--prompt", a->prompt, "prompt text; with a chat template, the content of one user message");
  cmd->add_option("--messages", a->messages, "JSON file: a list of {\"role\", \"content\"} messages, rendered with "
                                             "the chat template (ending with the assistant's turn opened)");
  cmd->add_option("--prompt-ids", a->prompt_ids, "prompt as token ids, e.g. \"11 1 2 3 12\" (no tokenizer needed); "
                                                 "the generated ids are printed");
  cmd->add_option("--system", a->system, "a system message before the --prompt user message (chat models)");
  cmd->add_flag("--raw", a->raw, "encode --prompt as plain text, without the chat template");
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "sampling temperature; 0 is greedy (default: "
                                                   "generation_config.json's, else 0.7; do_sample false there: 0)");
  cmd->add_option("--top-k", a->top_k, "sample among the K most likely tokens; 0 is off (default: "
                                       "generation_config.json's, else 0)");
  cmd->add_option("--top-p", a->top_p, "nucleus sampling: among the fewest most likely tokens holding mass P; 1 is "
                                       "off (default: generation_config.json's, else 1)");
  cmd->add_option("--seed", a->seed, "random seed of the sampling")->capture_default_str();
  cmd->add_option("--stop-ids", a->stop_ids, "more token ids that end the generation, e.g. \"13\" (besides "
                                             "generation_config.json's eos_token_id and the tokenizer's eos_token)");
  cmd->add_option("--dtype", a->dtype, "float32, bfloat16, float16 or float64")->capture_default_str();
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads", a->threads, "intra-op CPU threads (0: all cores)")->capture_default_str();
  return [a]() { return run_generate(*a); };
}

}  // namespace glint::cli
