#include "serve/wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/wire_format_lite.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "serve/tinker_public.pb.h"

namespace glint::tinker {

namespace {

namespace pb = google::protobuf;
using json = nlohmann::json;
using pb::internal::WireFormatLite;

// ---- Where malformed bytes fail ------------------------------------------------------

// The wire type a field of this schema arrives with (repeated numbers: packed, which
// is length-delimited, or one by one).
bool wire_type_fits(const pb::FieldDescriptor* f, int wire) {
  switch (f->type()) {
    case pb::FieldDescriptor::TYPE_MESSAGE:
    case pb::FieldDescriptor::TYPE_STRING:
    case pb::FieldDescriptor::TYPE_BYTES:
      return wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    case pb::FieldDescriptor::TYPE_DOUBLE:
      return wire == WireFormatLite::WIRETYPE_FIXED64 ||
             (f->is_repeated() && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
    case pb::FieldDescriptor::TYPE_FLOAT:
      return wire == WireFormatLite::WIRETYPE_FIXED32 ||
             (f->is_repeated() && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
    default:  // the integers, bool and the enums
      return wire == WireFormatLite::WIRETYPE_VARINT ||
             (f->is_repeated() && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  }
}

// Walks the tags of a message of type `d` against the schema and says where the bytes
// stop making sense ("" when they do not). At the top level it also picks up the
// request's model_id and seq_id, so that they are known even when the rest is broken.
std::string locate(pb::io::CodedInputStream& in, const pb::Descriptor* d, const std::string& where, int depth,
                   DecodedForwardBackward* head) {
  if (depth > 16) return where + ": nested too deeply";
  std::map<int, int> seen;  // field number -> entries so far (the index of a repeated one)
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return in.BytesUntilLimit() == 0 ? "" : where + ": a malformed field tag";
    const int number = int(WireFormatLite::GetTagFieldNumber(tag));
    const int wire = int(WireFormatLite::GetTagWireType(tag));
    const pb::FieldDescriptor* f = d->FindFieldByNumber(number);
    if (!f) {  // a field of a newer SDK: skipped, as long as it is whole
      if (!WireFormatLite::SkipField(&in, tag)) return where + ": field " + std::to_string(number) + " is malformed";
      continue;
    }
    std::string at = where + "." + f->name();
    if (f->is_repeated()) at += "[" + std::to_string(seen[number]++) + "]";
    if (!wire_type_fits(f, wire))
      return at + ": wire type " + std::to_string(wire) + " does not fit a " + f->type_name() + " field";
    switch (wire) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t v;
        if (!in.ReadVarint64(&v)) return at + ": a truncated number";
        if (head && depth == 0 && number == 2) head->seq_id = int32_t(uint32_t(v)) > 0 ? int32_t(uint32_t(v)) : -1;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64: {
        uint64_t v;
        if (!in.ReadLittleEndian64(&v)) return at + ": a truncated 8-byte value";
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED32: {
        uint32_t v;
        if (!in.ReadLittleEndian32(&v)) return at + ": a truncated 4-byte value";
        break;
      }
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t n;
        if (!in.ReadVarint32(&n)) return at + ": a truncated length";
        if (int64_t(n) > int64_t(in.BytesUntilLimit()))
          return at + ": its length (" + std::to_string(n) + " bytes) runs past the end of the message";
        if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
          const auto limit = in.PushLimit(int(n));
          std::string e = locate(in, f->message_type(), at, depth + 1, nullptr);
          if (!e.empty()) return e;
          in.PopLimit(limit);
        } else if (head && depth == 0 && number == 1) {
          if (!in.ReadString(&head->model_id, int(n))) return at + ": truncated";
        } else if (!in.Skip(int(n))) {
          return at + ": truncated";
        }
        break;
      }
      default:
        return at + ": wire type " + std::to_string(wire) + " is not used by this schema";
    }
  }
}

// ---- Decoding ------------------------------------------------------------------------

// A little-endian array of `T` in `bytes`, as `Out`s.
template <typename T, typename Out>
std::vector<Out> le_array(const std::string& bytes, const std::string& where, const char* type, const WireLimits& limits,
                          int64_t* budget) {
  GLINT_CHECK(bytes.size() % sizeof(T) == 0, where, ": ", bytes.size(), " bytes are not whole ", type, " values");
  const int64_t n = int64_t(bytes.size() / sizeof(T));
  GLINT_CHECK(n <= limits.max_values, where, ": ", n, " values, more than the ", limits.max_values, " a request may hold");
  GLINT_CHECK(n <= *budget, where, ": the request holds more values than the service reads in one request");
  *budget -= n;
  std::vector<Out> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * int64_t(sizeof(T)), sizeof(T));  // unaligned
    out[size_t(i)] = Out(v);
  }
  return out;
}

json tensor_json(const tinker_public::Tensor& t, const std::string& at, const WireLimits& limits, int64_t* budget) {
  GLINT_CHECK(t.encoding_case() != tinker_public::Tensor::kSparseCsr, at,
              ".sparse_csr: glint takes one-dimensional inputs, one value per token; send a dense tensor");
  const std::string& dense = t.dense();  // unset: no values
  json td;
  switch (t.dtype()) {
    case tinker_public::DTYPE_FLOAT32:
      td = {{"data", le_array<float, double>(dense, at + ".dense", "float32", limits, budget)}, {"dtype", "float32"}};
      break;
    case tinker_public::DTYPE_INT64:
      td = {{"data", le_array<int64_t, int64_t>(dense, at + ".dense", "int64", limits, budget)}, {"dtype", "int64"}};
      break;
    case tinker_public::DTYPE_INT32:
      td = {{"data", le_array<int32_t, int64_t>(dense, at + ".dense", "int32", limits, budget)}, {"dtype", "int64"}};
      break;
    default:
      fail(at, ".dtype: ", tinker_public::DType_Name(t.dtype()), " (", int(t.dtype()),
           ") is not an input type (FLOAT32, INT64 or INT32)");
  }
  if (t.shape_size() > 0) {
    json shape = json::array();
    for (int64_t s : t.shape()) shape.push_back(s);
    td["shape"] = shape;
  }
  return td;
}

json datum_json(const tinker_public::Datum& d, const std::string& at, const WireLimits& limits, int64_t* budget) {
  json chunks = json::array();
  for (int j = 0; j < d.model_input_size(); ++j) {
    const tinker_public::Chunk& c = d.model_input(j);
    const std::string where = at + ".model_input[" + std::to_string(j) + "]";
    switch (c.chunk_case()) {
      case tinker_public::Chunk::kEncodedText:
        chunks.push_back({{"type", "encoded_text"},
                          {"tokens", le_array<int32_t, int64_t>(c.encoded_text().tokens(), where + ".encoded_text.tokens",
                                                                "int32", limits, budget)}});
        break;
      case tinker_public::Chunk::kImage:
        fail(where, ".image: image chunks are not supported (the served model reads text: encoded_text)");
      case tinker_public::Chunk::kDmel:
        fail(where, ".dmel: audio chunks are not supported (the served model reads text: encoded_text)");
      default:
        fail(where, ": an empty chunk (none of encoded_text, image, dmel is set)");
    }
  }
  json inputs = json::object();
  for (const auto& [name, tensor] : d.loss_fn_inputs())
    inputs[name] = tensor_json(tensor, at + ".loss_fn_inputs[" + name + "]", limits, budget);
  return {{"model_input", {{"chunks", chunks}}}, {"loss_fn_inputs", inputs}};
}

// ---- Encoding ------------------------------------------------------------------------

std::string serialize(const pb::Message& m) {
  std::string s;
  {
    pb::io::StringOutputStream so(&s);
    pb::io::CodedOutputStream out(&so);
    out.SetSerializationDeterministic(true);  // map entries sorted: the same result, the same bytes
    m.SerializeToCodedStream(&out);
  }
  return s;
}

template <typename T>
void append_le(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

}  // namespace

DecodedForwardBackward decode_forward_backward(const std::string& bytes, const WireLimits& limits,
                                               DecodedForwardBackward* head) {
  const std::string msg = "ForwardBackwardRequest";
  // The schema walk first: it names the field where bytes go wrong, and refuses a known
  // field sent with another wire type, which libprotobuf would keep as an unknown field.
  DecodedForwardBackward scan;
  std::string where = msg + ": larger than 2 GiB";
  if (bytes.size() < size_t(std::numeric_limits<int>::max())) {
    pb::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()), int(bytes.size()));
    in.PushLimit(int(bytes.size()));
    where = locate(in, tinker_public::ForwardBackwardRequest::descriptor(), msg, 0, &scan);
  }
  tinker_public::ForwardBackwardRequest req;
  if (!where.empty() || !req.ParseFromString(bytes)) {
    if (head) *head = scan;
    fail("malformed protobuf ", where.empty() ? msg : where);
  }
  DecodedForwardBackward out;
  out.model_id = req.model_id();
  out.seq_id = req.seq_id() > 0 ? req.seq_id() : -1;
  out.forward_only = req.forward_only();
  if (head) {
    head->model_id = out.model_id;
    head->seq_id = out.seq_id;
    head->forward_only = out.forward_only;
  }
  int64_t budget = limits.max_values * 4;
  json data = json::array();
  for (int i = 0; i < req.data_size(); ++i)
    data.push_back(datum_json(req.data(i), msg + ".data[" + std::to_string(i) + "]", limits, &budget));
  json input = {{"loss_fn", req.loss_fn()}, {"data", data}};
  if (req.loss_fn_config_size() > 0) {
    json cfg = json::object();
    for (const auto& [k, v] : req.loss_fn_config()) cfg[k] = v;
    input["loss_fn_config"] = cfg;
  }
  out.body = {{"model_id", out.model_id}, {out.forward_only ? "forward_input" : "forward_backward_input", input}};
  if (out.seq_id > 0) out.body["seq_id"] = out.seq_id;
  return out;
}

std::string encode_forward_backward_output(const json& result) {
  tinker_public::ForwardBackwardOutput out;
  // The SDK keeps the type's text after the last ':'; the records are ArrayRecords.
  out.set_loss_fn_output_type("ArrayRecord");
  const json& outputs = result.at("loss_fn_outputs");
  if (!outputs.empty()) {
    tinker_public::ArrayRecord* rec = out.add_loss_fn_outputs();
    rec->set_num_datums(int64_t(outputs.size()));
    for (auto field = outputs[0].begin(); field != outputs[0].end(); ++field) {
      tinker_public::BatchedTensor& bt = (*rec->mutable_fields())[field.key()];
      const std::string dtype = field->value("dtype", "float32");
      bt.set_dtype(dtype == "int64" ? tinker_public::DTYPE_INT64 : tinker_public::DTYPE_FLOAT32);
      const json& shape0 = field->value("shape", json::array());
      for (size_t k = 1; k < shape0.size(); ++k) bt.add_trailing_shape(shape0[k].get<int64_t>());
      std::string data, offsets;
      append_le<int64_t>(&offsets, 0);
      for (const json& datum : outputs) {
        for (const json& v : datum.at(field.key()).at("data")) {
          if (dtype == "int64") append_le<int64_t>(&data, v.get<int64_t>());
          else append_le<float>(&data, v.is_null() ? std::nanf("") : v.get<float>());
        }
        append_le<int64_t>(&offsets, int64_t(data.size()));
      }
      bt.set_data(std::move(data));
      bt.set_offsets(std::move(offsets));
    }
  }
  for (auto m = result.at("metrics").begin(); m != result.at("metrics").end(); ++m)
    (*out.mutable_metrics())[m.key()] = m->get<double>();
  return serialize(out);
}

std::string encode_sample_response(const json& result) {
  tinker_public::SampleResponse out;
  for (const json& s : result.at("sequences")) {
    tinker_public::SampledSequence* seq = out.add_sequences();
    const std::string reason = s.at("stop_reason").get<std::string>();
    GLINT_CHECK(reason == "stop" || reason == "length", "a sample's stop_reason '", reason, "' has no protobuf form");
    seq->set_stop_reason(reason == "length" ? tinker_public::STOP_REASON_LENGTH : tinker_public::STOP_REASON_STOP);
    std::string tokens, logprobs;
    for (const json& t : s.at("tokens")) append_le<int32_t>(&tokens, t.get<int32_t>());
    seq->set_tokens(std::move(tokens));
    if (s.contains("logprobs") && !s["logprobs"].is_null()) {
      for (const json& l : s["logprobs"]) append_le<float>(&logprobs, l.get<float>());
      seq->set_logprobs(std::move(logprobs));
    }
  }
  if (result.contains("prompt_logprobs") && !result["prompt_logprobs"].is_null()) {
    std::string lp;  // NaN where JSON has null (position 0)
    for (const json& l : result["prompt_logprobs"]) append_le<float>(&lp, l.is_null() ? std::nanf("") : l.get<float>());
    out.set_prompt_logprobs(std::move(lp));
  }
  return serialize(out);
}

std::string wire_text(const std::string& type, const std::string& bytes) {
  std::unique_ptr<pb::Message> m;
  if (type == "ForwardBackwardRequest") m = std::make_unique<tinker_public::ForwardBackwardRequest>();
  else if (type == "ForwardBackwardOutput") m = std::make_unique<tinker_public::ForwardBackwardOutput>();
  else if (type == "SampleResponse") m = std::make_unique<tinker_public::SampleResponse>();
  else fail("wire_text: unknown message type '", type, "'");
  GLINT_CHECK(m->ParseFromString(bytes), type, ": malformed bytes");
  std::string text;
  pb::TextFormat::PrintToString(*m, &text);
  return text;
}

}  // namespace glint::tinker
