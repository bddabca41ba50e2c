// The Tinker API's protobuf wire (serve/tinker_public.proto), beside its JSON: SDK 0.25
// and later post forward_backward (and forward, with forward_only) as a protobuf
// ForwardBackwardRequest, and read the results of forward, forward_backward, sample and
// compute_logprobs as protobuf when they send `Accept: application/x-protobuf`.
//
// The service speaks JSON inside: a decoded request becomes the JSON body that SDK 0.24
// posts for the same call, and a result is encoded from the JSON the service would
// answer, so both wires share one validation and one result. Only this file's .cc sees
// libprotobuf.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace glint::tinker {

inline constexpr const char* kProtobufType = "application/x-protobuf";

// What a decoder may hold in memory for one request, so that a body of a few bytes
// cannot ask for gigabytes: values per array (tokens of a datum, values of an input).
struct WireLimits {
  int64_t max_values = int64_t(1) << 22;
};

struct DecodedForwardBackward {
  std::string model_id;
  int64_t seq_id = -1;  // -1: unset (the wire's 0)
  bool forward_only = false;
  // The JSON body SDK 0.24 posts: {model_id, seq_id?, forward_backward_input |
  // forward_input: {loss_fn, loss_fn_config?, data: [Datum...]}}.
  nlohmann::json body;
};

// Decodes a ForwardBackwardRequest. Throws glint::Error naming the field that is wrong
// ("ForwardBackwardRequest.data[0].loss_fn_inputs[weights].dense: 15 bytes are not whole
// float32 values"). Whatever the failure, *head gets the model_id and seq_id when the
// bytes hold them, so a refused request still names its place in the model's order.
DecodedForwardBackward decode_forward_backward(const std::string& bytes, const WireLimits& limits,
                                               DecodedForwardBackward* head);

// The protobuf forms of a result the service answers in JSON:
//   ForwardBackwardOutput from {loss_fn_output_type, loss_fn_outputs: [{name: TensorData}
//   per datum], metrics}; SampleResponse from {sequences: [{stop_reason, tokens,
//   logprobs}], prompt_logprobs?: [null, x, ...]}.
std::string encode_forward_backward_output(const nlohmann::json& result);
std::string encode_sample_response(const nlohmann::json& result);

// protoc --decode's text of a message of this schema (tests, debugging): `type` is
// "ForwardBackwardRequest", "ForwardBackwardOutput" or "SampleResponse".
std::string wire_text(const std::string& type, const std::string& bytes);

}  // namespace glint::tinker
