// What a model directory says about generating from it, read the way transformers reads it
// (generation/configuration_utils.py): generation_config.json when the directory has one
// (GenerationConfig.from_pretrained); otherwise the same fields of config.json, its top
// level first, then a multimodal config's text_config for those still unset
// (GenerationConfig.from_model_config). A field found nowhere takes GenerationConfig's
// default: do_sample false (greedy decoding), temperature 1.0, top_k 50, top_p 1.0.
//
// The stop tokens gather every source a user expects to end a generation (see
// model_stop_token_ids), so a model stops at its EOS however the prompt was given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace glint {

class Tokenizer;

struct GenerationDefaults {
  bool do_sample = false;     // false: greedy, whatever the temperature says
  double temperature = 1.0;   // used when do_sample
  int64_t top_k = 50;         // 0 (or null in the file): off
  double top_p = 1.0;         // 1 (or null in the file): off
  std::vector<int64_t> stop_token_ids;  // model_stop_token_ids
};

// The token ids that end a generation from `model_dir` when the caller names none, in
// this order, without repeats:
//   - generation_config.json's eos_token_id (an int or a list), else config.json's (the
//     top level, else its text_config: ModelConfig::eos_token_id);
//   - when `tokenizer_dir` ("" : model_dir) holds a tokenizer.json, the id of the eos_token
//     its tokenizer_config.json names (left out when the tokenizer has no such token).
// `tokenizer`, when given, is tokenizer_dir's already loaded (else it is loaded here if
// needed). A model_dir of "" (a model built from a config) gives the tokenizer's EOS
// alone. Throws glint::Error naming the file and field for an eos_token_id that is not a
// token id (an integer >= 0) or a list of them.
std::vector<int64_t> model_stop_token_ids(const std::string& model_dir, const std::string& tokenizer_dir = "",
                                          const Tokenizer* tokenizer = nullptr);

// The sampling fields as described at the top of this file, and model_stop_token_ids.
// Throws glint::Error naming the file and field for a wrongly typed or out-of-range value
// (temperature < 0, top_k < 0, top_p outside (0, 1]).
GenerationDefaults read_generation_defaults(const std::string& model_dir, const std::string& tokenizer_dir = "",
                                            const Tokenizer* tokenizer = nullptr);

}  // namespace glint
