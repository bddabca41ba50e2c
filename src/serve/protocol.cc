#include "serve/protocol.h"

#include <cmath>

#include "core/error.h"
#include "serve/losses.h"

namespace glint {
namespace tinker {

namespace {

const nlohmann::json* find(const nlohmann::json& j, const char* key, const std::string& where) {
  GLINT_CHECK(j.is_object(), where, ": expected a JSON object");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string path(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }

}  // namespace

namespace {

// j[key] of type T when `ok` accepts it; absent or null gives the fallback.
template <typename T, typename Ok>
T field(const nlohmann::json& j, const char* key, const std::string& where, const std::optional<T>& fallback, Ok ok,
        const char* expected) {
  const nlohmann::json* v = find(j, key, where);
  if (!v) {
    GLINT_CHECK(fallback, path(where, key), ": required");
    return *fallback;
  }
  GLINT_CHECK(ok(*v), path(where, key), ": expected ", expected, ", got ", v->dump());
  return v->get<T>();
}

}  // namespace

std::string text(const nlohmann::json& j, const char* key, const std::string& where, std::optional<std::string> fallback) {
  return field<std::string>(j, key, where, fallback, [](const nlohmann::json& v) { return v.is_string(); }, "a string");
}

int64_t integer(const nlohmann::json& j, const char* key, const std::string& where, std::optional<int64_t> fallback) {
  return field<int64_t>(j, key, where, fallback, [](const nlohmann::json& v) { return v.is_number_integer(); },
                        "an integer");
}

double number(const nlohmann::json& j, const char* key, const std::string& where, std::optional<double> fallback) {
  const double x = field<double>(j, key, where, fallback, [](const nlohmann::json& v) { return v.is_number(); }, "a number");
  GLINT_CHECK(std::isfinite(x), path(where, key), ": expected a finite number");
  return x;
}

bool boolean(const nlohmann::json& j, const char* key, const std::string& where, std::optional<bool> fallback) {
  return field<bool>(j, key, where, fallback, [](const nlohmann::json& v) { return v.is_boolean(); }, "true or false");
}

const nlohmann::json& object(const nlohmann::json& j, const char* key, const std::string& where) {
  static const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json* v = find(j, key, where);
  if (!v) return empty;
  GLINT_CHECK(v->is_object(), path(where, key), ": expected an object, got ", v->type_name());
  return *v;
}

std::vector<int64_t> model_input_tokens(const nlohmann::json& model_input, const std::string& where, int64_t vocab) {
  GLINT_CHECK(model_input.is_object(), where, ": expected a ModelInput object");
  auto it = model_input.find("chunks");
  GLINT_CHECK(it != model_input.end() && it->is_array(), where, ".chunks: required (a list)");
  std::vector<int64_t> tokens;
  for (size_t c = 0; c < it->size(); ++c) {
    const nlohmann::json& chunk = (*it)[c];
    const std::string at = where + ".chunks[" + std::to_string(c) + "]";
    const std::string type = text(chunk, "type", at, "encoded_text");
    GLINT_CHECK(type == "encoded_text", at, ".type: '", type, "' chunks are not supported (text models: encoded_text)");
    auto t = chunk.find("tokens");
    GLINT_CHECK(t != chunk.end() && t->is_array(), at, ".tokens: required (a list of token ids)");
    for (size_t i = 0; i < t->size(); ++i) {
      const nlohmann::json& v = (*t)[i];
      GLINT_CHECK(v.is_number_integer(), at, ".tokens[", i, "]: expected an integer token id, got ", v.dump());
      int64_t id = v.get<int64_t>();
      GLINT_CHECK(id >= 0 && id < vocab, at, ".tokens[", i, "]: token id ", id, " is outside the vocabulary [0, ",
                  vocab, ")");
      tokens.push_back(id);
    }
  }
  return tokens;
}

namespace {

// TensorData's values, flat, checked to be N long (shape [N] when given).
std::vector<double> tensor_values(const nlohmann::json& td, const std::string& where, size_t n, bool integers) {
  GLINT_CHECK(td.is_object(), where, ": expected TensorData {data, dtype, shape}");
  const std::string dtype = text(td, "dtype", where, integers ? "int64" : "float32");
  GLINT_CHECK(dtype == "int64" || dtype == "float32", where, ".dtype: '", dtype, "' (int64 or float32)");
  auto d = td.find("data");
  GLINT_CHECK(d != td.end() && d->is_array(), where, ".data: required (a list)");
  if (auto s = td.find("shape"); s != td.end() && !s->is_null()) {
    GLINT_CHECK(s->is_array() && s->size() == 1 && (*s)[0].is_number_integer(), where, ".shape: ", s->dump(),
                " (one dimension, as long as the model input, is supported)");
  }
  GLINT_CHECK(d->size() == n, where, ": ", d->size(), " values for ", n, " input tokens (need one per token)");
  std::vector<double> out;
  out.reserve(n);
  for (size_t i = 0; i < d->size(); ++i) {
    const nlohmann::json& v = (*d)[i];
    GLINT_CHECK(integers ? v.is_number_integer() : v.is_number(), where, ".data[", i, "]: expected ",
                integers ? "an integer" : "a number", ", got ", v.dump());
    double x = v.get<double>();
    GLINT_CHECK(std::isfinite(x), where, ".data[", i, "]: not a finite number");
    out.push_back(x);
  }
  return out;
}

}  // namespace

Datum parse_datum(const nlohmann::json& datum, const std::string& where, const TinkerLoss& loss, int64_t vocab) {
  GLINT_CHECK(datum.is_object(), where, ": expected a Datum object");
  Datum d;
  auto mi = datum.find("model_input");
  GLINT_CHECK(mi != datum.end(), where, ".model_input: required");
  d.tokens = model_input_tokens(*mi, where + ".model_input", vocab);
  GLINT_CHECK(!d.tokens.empty(), where, ".model_input: no tokens");
  const nlohmann::json& in = object(datum, "loss_fn_inputs", where);
  const std::string at = where + ".loss_fn_inputs";
  std::vector<std::string> known = {"target_tokens"};
  for (const auto& name : loss.float_inputs()) known.push_back(name);
  for (auto it = in.begin(); it != in.end(); ++it)
    GLINT_CHECK(std::find(known.begin(), known.end(), it.key()) != known.end(), at, ".", it.key(),
                ": not an input of ", loss.name);
  GLINT_CHECK(in.contains("target_tokens"), at, ".target_tokens: required");
  for (double x : tensor_values(in.at("target_tokens"), at + ".target_tokens", d.tokens.size(), true)) {
    const int64_t id = int64_t(x);
    GLINT_CHECK(id >= 0 && id < vocab, at, ".target_tokens: token id ", id, " is outside the vocabulary [0, ", vocab, ")");
    d.targets.push_back(id);
  }
  for (const auto& name : loss.float_inputs()) {
    if (!in.contains(name)) {
      GLINT_CHECK(name == "weights", at, ".", name, ": required by ", loss.name);
      d.inputs[name].assign(d.tokens.size(), 1.0);
      continue;
    }
    d.inputs[name] = tensor_values(in.at(name), at + "." + name, d.tokens.size(), false);
  }
  return d;
}

TinkerLoss parse_loss(const nlohmann::json& loss_fn, const nlohmann::json& config, const std::string& where) {
  GLINT_CHECK(loss_fn.is_string(), where, ".loss_fn: expected a loss name");
  std::map<std::string, double> cfg;
  if (!config.is_null()) {
    GLINT_CHECK(config.is_object(), where, ".loss_fn_config: expected an object of numbers");
    for (auto it = config.begin(); it != config.end(); ++it) {
      GLINT_CHECK(it->is_number(), where, ".loss_fn_config.", it.key(), ": expected a number");
      cfg[it.key()] = it->get<double>();
    }
  }
  try {
    return TinkerLoss::parse(loss_fn.get<std::string>(), cfg);
  } catch (const Error& e) {
    fail(where, ".", e.what());
  }
}

nlohmann::json tensor_data(const std::vector<double>& values) {
  return {{"data", values}, {"dtype", "float32"}, {"shape", {values.size()}}};
}

void check_checkpoint_name(const std::string& name, const std::string& where) {
  GLINT_CHECK(!name.empty() && name.size() <= 128, where, ": a checkpoint name is 1 to 128 characters");
  GLINT_CHECK(name[0] != '.', where, ": '", name, "' starts with '.'");
  for (char c : name)
    GLINT_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.', where, ": '", name,
                "' has a character other than letters, digits, '-', '_' and '.'");
}

}  // namespace tinker
}  // namespace glint
