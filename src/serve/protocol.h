// Reading the Tinker API's JSON: typed fields with the SDK's defaults, datums and model
// inputs, checked against the served model. Every error is a glint::Error whose message
// names the field ("forward_backward_input.data[2].loss_fn_inputs.weights: ..."), which
// the service answers with 400.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace glint {

struct TinkerLoss;

namespace tinker {

// j[key] at `where`: absent or null gives `fallback` (nullopt: the field is required).
std::string text(const nlohmann::json& j, const char* key, const std::string& where,
                 std::optional<std::string> fallback = std::nullopt);
int64_t integer(const nlohmann::json& j, const char* key, const std::string& where,
                std::optional<int64_t> fallback = std::nullopt);
double number(const nlohmann::json& j, const char* key, const std::string& where,
              std::optional<double> fallback = std::nullopt);
bool boolean(const nlohmann::json& j, const char* key, const std::string& where,
             std::optional<bool> fallback = std::nullopt);
// An object field (absent or null: an empty object).
const nlohmann::json& object(const nlohmann::json& j, const char* key, const std::string& where);

// The tokens of a ModelInput {chunks:[{type?: "encoded_text", tokens:[...]}]}, each in
// [0, vocab). Image chunks are refused (the served models read text).
std::vector<int64_t> model_input_tokens(const nlohmann::json& model_input, const std::string& where, int64_t vocab);

// One Datum for `loss`: N input tokens, N target tokens, and the loss's float inputs
// (each N values; cross_entropy's weights default to ones).
struct Datum {
  std::vector<int64_t> tokens, targets;
  std::map<std::string, std::vector<double>> inputs;
};
Datum parse_datum(const nlohmann::json& datum, const std::string& where, const TinkerLoss& loss, int64_t vocab);

// A loss name and loss_fn_config (null: none) as a TinkerLoss.
TinkerLoss parse_loss(const nlohmann::json& loss_fn, const nlohmann::json& config, const std::string& where);

// TensorData {data, dtype: "float32", shape: [N]}.
nlohmann::json tensor_data(const std::vector<double>& values);

// A name a client gives to a checkpoint: 1-128 of letters, digits, '-', '_', '.', not
// starting with '.'. Throws naming `where` otherwise.
void check_checkpoint_name(const std::string& name, const std::string& where);

}  // namespace tinker
}  // namespace glint
