// The protobuf wire (serve/wire.h) against the bytes Tinker SDK 0.25.0's own converters
// produce (captured from the SDK; shared/facts/tinker-protobuf.md §5): requests decoded
// field by field and into the JSON SDK 0.24.1 posts for the same call, results encoded
// byte for byte; malformed bodies refused naming their field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "core/error.h"
#include "serve/proto_util.h"
#include "serve/wire.h"

namespace {

using json = nlohmann::json;
using glint::testing::proto::unhex;
namespace proto = glint::testing::proto;
namespace tinker = glint::tinker;

// Example A: model "model-1", seq_id 1, tokens 101..104, target_tokens 102..105 (int64),
// weights 0,1,1,1 (float32), cross_entropy, as the SDK sent it (144 bytes).
const std::string kRequestA = unhex(
    "0a076d6f64656c2d3110011a740a140a120a106500000066000000670000006800000012220a077765696768"
    "747312170a10000000000000803f0000803f0000803f180122010412380a0d7461726765745f746f6b656e73"
    "12270a2066000000000000006700000000000000680000000000000069000000000000001802220104220d63"
    "726f73735f656e74726f7079");

std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

std::string error_of(const std::string& bytes, tinker::DecodedForwardBackward* head = nullptr) {
  try {
    tinker::decode_forward_backward(bytes, {}, head);
  } catch (const glint::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TinkerWire, ForwardBackwardRequestOfTheSdkDecodesToTheJsonOf0_24) {
  ASSERT_EQ(kRequestA.size(), 144u);
  tinker::DecodedForwardBackward d = tinker::decode_forward_backward(kRequestA, {}, nullptr);
  EXPECT_EQ(d.model_id, "model-1");
  EXPECT_EQ(d.seq_id, 1);
  EXPECT_FALSE(d.forward_only);
  const json sdk_0_24 = json::parse(
      R"({"forward_backward_input":{"data":[{"loss_fn_inputs":{"target_tokens":{"data":[102,103,104,105],"dtype":"int64","shape":[4]},"weights":{"data":[0.0,1.0,1.0,1.0],"dtype":"float32","shape":[4]}},"model_input":{"chunks":[{"tokens":[101,102,103,104],"type":"encoded_text"}]}}],"loss_fn":"cross_entropy"},"model_id":"model-1","seq_id":1})");
  EXPECT_EQ(d.body, sdk_0_24) << d.body.dump();
  // Each field's type as JSON gives it: token ids are integers, weights numbers.
  const json& in = d.body["forward_backward_input"]["data"][0]["loss_fn_inputs"];
  EXPECT_TRUE(in["target_tokens"]["data"][0].is_number_integer());
  EXPECT_TRUE(in["weights"]["data"][1].is_number_float());
}

TEST(TinkerWire, ForwardOnlyAndALossConfigAsTheSdkSendsThem) {
  // forward() on the same datum: seq_id 2 and forward_only appended (146 bytes).
  std::string fwd = kRequestA;
  fwd[10] = 0x02;  // the seq_id varint
  fwd += unhex("3001");
  tinker::DecodedForwardBackward d = tinker::decode_forward_backward(fwd, {}, nullptr);
  EXPECT_EQ(d.seq_id, 2);
  EXPECT_TRUE(d.forward_only);
  EXPECT_TRUE(d.body.contains("forward_input"));
  EXPECT_FALSE(d.body.contains("forward_backward_input"));
  // ppo with clip_low_threshold 0.8 and forward_only: the tail the SDK writes.
  std::string ppo = kRequestA.substr(0, kRequestA.size() - 15) +
                    unhex("2203") + "ppo" + unhex("2a1d0a12") + "clip_low_threshold" + unhex("119a9999999999e93f") +
                    unhex("3001");
  d = tinker::decode_forward_backward(ppo, {}, nullptr);
  EXPECT_EQ(d.body["forward_input"]["loss_fn"], "ppo");
  EXPECT_EQ(d.body["forward_input"]["loss_fn_config"], json({{"clip_low_threshold", 0.8}}));
  // seq_id 0 on the wire is "unset".
  std::string unset = proto::forward_backward("m", 0, {proto::datum({1, 2}, {{"target_tokens", {2, 3}}})},
                                              "cross_entropy", {}, false);
  d = tinker::decode_forward_backward(unset, {}, nullptr);
  EXPECT_EQ(d.seq_id, -1);
  EXPECT_FALSE(d.body.contains("seq_id"));
}

TEST(TinkerWire, FieldsOfANewerSdkAreSkipped) {
  // Unknown fields of every wire type, at the top and inside a datum, change nothing.
  std::string extra = kRequestA + unhex("b80601") + unhex("c2060568656c6c6f") + unhex("c9060000000000000000") +
                      unhex("d50600000000");
  tinker::DecodedForwardBackward d = tinker::decode_forward_backward(extra, {}, nullptr);
  EXPECT_EQ(d.body, tinker::decode_forward_backward(kRequestA, {}, nullptr).body);
}

TEST(TinkerWire, MalformedBodiesAreRefusedNamingTheField) {
  // Truncated inside the weights' bytes: the walk says where.
  tinker::DecodedForwardBackward head;
  std::string e = error_of(kRequestA.substr(0, 60), &head);
  EXPECT_NE(e.find("ForwardBackwardRequest.data[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("runs past the end"), std::string::npos) << e;
  // Even so, the model and seq_id were read: the refusal spends that seq_id.
  EXPECT_EQ(head.model_id, "model-1");
  EXPECT_EQ(head.seq_id, 1);
  // A wire type that does not fit the field (model_id as a varint).
  e = error_of(unhex("0807"));
  EXPECT_NE(e.find("ForwardBackwardRequest.model_id: wire type 0"), std::string::npos) << e;
  // A float32 array whose length is not a multiple of 4.
  std::string d = proto::datum({1, 2}, {{"target_tokens", {2, 3}}});
  std::string bad_weights;
  proto::bytes_field(&bad_weights, 1, std::string(7, '\0'));
  proto::varint_field(&bad_weights, 3, 1);
  proto::bytes_field(&d, 2, proto::input_entry("weights", bad_weights));
  e = error_of(proto::forward_backward("m", 3, {d}, "cross_entropy", {}, false));
  EXPECT_NE(e.find("ForwardBackwardRequest.data[0].loss_fn_inputs[weights].dense: 7 bytes are not whole float32 values"),
            std::string::npos)
      << e;
  // Token ids of 5 bytes.
  std::string text, chunk, d2;
  proto::bytes_field(&text, 1, std::string(5, '\1'));
  proto::bytes_field(&chunk, 1, text);
  proto::bytes_field(&d2, 1, chunk);
  e = error_of(proto::forward_backward("m", 3, {d2}, "cross_entropy", {}, false));
  EXPECT_NE(e.find("data[0].model_input[0].encoded_text.tokens: 5 bytes are not whole int32 values"), std::string::npos) << e;
  // A two-dimensional input in CSR form, an image, an empty chunk, an unknown dtype.
  std::string csr_tensor, d3 = proto::datum({1, 2}, {{"target_tokens", {2, 3}}});
  proto::bytes_field(&csr_tensor, 2, "");
  proto::varint_field(&csr_tensor, 3, 1);
  proto::bytes_field(&d3, 2, proto::input_entry("weights", csr_tensor));
  e = error_of(proto::forward_backward("m", 3, {d3}, "cross_entropy", {}, false));
  EXPECT_NE(e.find("loss_fn_inputs[weights].sparse_csr: glint takes one-dimensional inputs"), std::string::npos) << e;
  std::string image, image_chunk, d4;
  proto::bytes_field(&image, 1, "\x89PNG");
  proto::bytes_field(&image_chunk, 2, image);
  proto::bytes_field(&d4, 1, image_chunk);
  e = error_of(proto::forward_backward("m", 3, {d4}, "cross_entropy", {}, false));
  EXPECT_NE(e.find("data[0].model_input[0].image: image chunks are not supported"), std::string::npos) << e;
  std::string d5;
  proto::bytes_field(&d5, 1, "");
  e = error_of(proto::forward_backward("m", 3, {d5}, "cross_entropy", {}, false));
  EXPECT_NE(e.find("data[0].model_input[0]: an empty chunk"), std::string::npos) << e;
  std::string bf16_tensor, d6 = proto::datum({1, 2}, {});
  proto::bytes_field(&bf16_tensor, 1, std::string(4, '\0'));
  proto::varint_field(&bf16_tensor, 3, 4);
  proto::bytes_field(&d6, 2, proto::input_entry("target_tokens", bf16_tensor));
  e = error_of(proto::forward_backward("m", 3, {d6}, "cross_entropy", {}, false));
  EXPECT_NE(e.find("loss_fn_inputs[target_tokens].dtype: DTYPE_BFLOAT16 (4) is not an input type"), std::string::npos) << e;
  // Not protobuf at all (JSON sent with the protobuf Content-Type).
  e = error_of("{\"model_id\": \"m\"}");
  EXPECT_NE(e.find("malformed protobuf ForwardBackwardRequest"), std::string::npos) << e;
}

TEST(TinkerWire, AFewBytesCannotAskForGigabytes) {
  // A tokens field that claims 2^31 bytes in a 20-byte body: refused before any allocation.
  std::string big;
  proto::tag(&big, 3, 2);
  proto::varint(&big, 0x7ffffff0);
  std::string e = error_of(big + "xyz");
  EXPECT_NE(e.find("ForwardBackwardRequest.data[0]: its length (2147483632 bytes) runs past the end"), std::string::npos)
      << e;
  // Within the body, but more values than a datum may hold.
  tinker::WireLimits small;
  small.max_values = 3;
  std::string four = proto::forward_backward("m", 1, {proto::datum({1, 2, 3, 4}, {})}, "cross_entropy", {}, false);
  try {
    tinker::decode_forward_backward(four, small, nullptr);
    ADD_FAILURE() << "4 tokens passed a limit of 3";
  } catch (const glint::Error& err) {
    EXPECT_NE(std::string(err.what()).find("4 values, more than the 3"), std::string::npos) << err.what();
  }
}

TEST(TinkerWire, SampleResponsesEncodeToTheSdksBytes) {
  // Example B: two sequences, the first stopped on length, the second on a stop token.
  const json b = {{"sequences",
                   {{{"stop_reason", "length"}, {"tokens", {11, 12, 13}}, {"logprobs", {-0.5, -1.0, -0.25}}},
                    {{"stop_reason", "stop"}, {"tokens", {21, 22, 23}}, {"logprobs", {-2.0, -0.125, -1.5}}}}},
                  {"type", "sample"}};
  EXPECT_EQ(hex(tinker::encode_sample_response(b)),
            "0a1e0801120c0b0000000c0000000d0000001a0c000000bf000080bf000080be0a1c120c1500000016000000170000001a0c000000c0"
            "000000be0000c0bf");
  // Example B2: compute_logprobs, with the prompt's first log-probability null (NaN).
  const json b2 = {{"sequences", {{{"stop_reason", "length"}, {"tokens", {7}}, {"logprobs", {-0.75}}}}},
                   {"prompt_logprobs", {nullptr, -1.5, -0.5}},
                   {"type", "sample"}};
  EXPECT_EQ(hex(tinker::encode_sample_response(b2)), "0a0e08011204070000001a04000040bf120c0000c07f0000c0bf000000bf");
}

TEST(TinkerWire, ForwardBackwardOutputsEncodeToTheSdksBytes) {
  // Example C: one datum's logprobs and loss:sum.
  const json c = {{"loss_fn_output_type", "TensorData"},
                  {"loss_fn_outputs", {{{"logprobs", {{"data", {-1.0, -2.0, -0.5, -0.25}}, {"dtype", "float32"}, {"shape", {4}}}}}}},
                  {"metrics", {{"loss:sum", 2.75}}}};
  EXPECT_EQ(hex(tinker::encode_forward_backward_output(c)),
            "0a0b41727261795265636f7264123612320a086c6f6770726f627312260a10000080bf000000c0000000bf000080be12100000000000"
            "0000001000000000000000180118011a130a086c6f73733a73756d110000000000000640");
  // Two datums of 2 and 3 values: one record, byte offsets [0, 8, 20], two metrics.
  const json two = {{"loss_fn_outputs",
                     {{{"logprobs", {{"data", {-1.0, -2.0}}, {"dtype", "float32"}, {"shape", {2}}}}},
                      {{"logprobs", {{"data", {-3.0, -4.0, -5.0}}, {"dtype", "float32"}, {"shape", {3}}}}}}},
                    {"metrics", {{"loss:sum", 15.0}, {"grad_norm:mean", 0.5}}}};
  const proto::Fields out = proto::parse(tinker::encode_forward_backward_output(two));
  const proto::Fields rec = proto::parse(out.one(2));
  EXPECT_EQ(rec.number(3), 2u);  // num_datums
  const proto::Fields entry = proto::parse(rec.one(2));
  EXPECT_EQ(entry.one(1), "logprobs");
  const proto::Fields batch = proto::parse(entry.one(2));
  EXPECT_EQ(proto::values<float>(batch.one(1)), std::vector<float>({-1, -2, -3, -4, -5}));
  EXPECT_EQ(proto::values<int64_t>(batch.one(2)), std::vector<int64_t>({0, 8, 20}));
  EXPECT_EQ(batch.number(3), 1u);  // FLOAT32
  std::map<std::string, double> metrics;
  for (const std::string& m : out.all(3)) {
    const proto::Fields kv = proto::parse(m);
    metrics[kv.one(1)] = proto::as_double(kv.one(2));
  }
  EXPECT_EQ(metrics, (std::map<std::string, double>{{"loss:sum", 15.0}, {"grad_norm:mean", 0.5}}));
  // libprotobuf reads back what was written.
  EXPECT_NE(tinker::wire_text("ForwardBackwardOutput", tinker::encode_forward_backward_output(two))
                .find("num_datums: 2"),
            std::string::npos);
}

}  // namespace
