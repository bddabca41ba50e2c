// The Tinker API's protobuf wire (serve/wire.h): a ForwardBackwardRequest body as SDK
// 0.25 posts it, decoded under the limits the service sets. Any bytes decode to the JSON
// body of the same request or are refused with glint::Error; a decoded body is a JSON
// object whose arrays stay within the limits.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "serve/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  glint::tinker::WireLimits limits;
  limits.max_values = 64;
  glint::tinker::DecodedForwardBackward head;
  try {
    glint::tinker::DecodedForwardBackward d = glint::tinker::decode_forward_backward(bytes, limits, &head);
    glint::fuzz::check(d.body.is_object(), "a decoded request is a JSON object");
    const char* key = d.forward_only ? "forward_input" : "forward_backward_input";
    for (const auto& datum : d.body.at(key).at("data")) {
      for (const auto& chunk : datum.at("model_input").at("chunks"))
        glint::fuzz::check(int64_t(chunk.at("tokens").size()) <= limits.max_values, "tokens within the limit");
      for (const auto& [name, t] : datum.at("loss_fn_inputs").items())
        glint::fuzz::check(int64_t(t.at("data").size()) <= limits.max_values, "values within the limit");
    }
    d.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const glint::Error&) {
  }
  return 0;
}
