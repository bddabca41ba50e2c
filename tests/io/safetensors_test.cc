// SafetensorsFile and write_safetensors. The format checks build and parse files by
// hand (std::ofstream / std::ifstream + nlohmann), independently of the code under test.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include "core/fs.h"
#include "core/error.h"
#include "io/safetensors.h"

#include "test_util.h"

namespace glint {
namespace {

using glint::read_file;

namespace fs = std::filesystem;

std::string safetensors_dir(const std::string& name) {
  return glint::testing::fresh_temp_dir("io_st_" + name);
}

// Writes a safetensors file by hand: 8-byte little-endian length, header, raw bytes.
// `header_len` overrides the stored length when given.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               std::optional<uint64_t> header_len = std::nullopt) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  uint64_t n = header_len.value_or(header.size());
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

template <typename T>
std::string bytes_of(std::initializer_list<T> v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}
std::string floats(std::initializer_list<float> v) { return bytes_of<float>(v); }


// Opening `path` throws glint::Error whose message names the path and `word`.
void expect_open_error(const std::string& path, const std::string& word) {
  try {
    SafetensorsFile f(path);
    ADD_FAILURE() << "no error; expected one about: " << word;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(word), std::string::npos) << msg;
  }
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  std::string d = safetensors_dir("hand");
  std::string p = d + "/x.safetensors";
  // Entries out of offset order, an I64, a BF16 written as raw bits (0x3F80 = 1.0,
  // 0xC040 = -3.0), a scalar, and the header padded with spaces like the official writer.
  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)"
                       R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                       R"("i":{"dtype":"I64","shape":[2,1],"data_offsets":[20,36]},)"
                       R"("h":{"dtype":"BF16","shape":[2],"data_offsets":[36,40]},)"
                       R"("s":{"dtype":"F32","shape":[],"data_offsets":[40,44]}})";
  header.append(7, ' ');
  std::string data = floats({1, 2, 3, 4.5f, -1}) + bytes_of<int64_t>({-7, 1LL << 40}) +
                     bytes_of<uint16_t>({0x3F80, 0xC040}) + floats({0.25f});
  write_raw(p, header, data);
  SafetensorsFile f(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.keys(), (std::vector<std::string>{"a", "b", "h", "i", "s"}));
  EXPECT_TRUE(f.contains("a"));
  EXPECT_FALSE(f.contains("__metadata__"));
  EXPECT_TRUE(at::equal(f.read("a"), at::tensor({1.0f, 2.0f, 3.0f})));
  EXPECT_TRUE(at::equal(f.read("b"), at::tensor({4.5f, -1.0f})));
  EXPECT_TRUE(at::equal(f.read("i"), at::tensor({int64_t(-7), int64_t(1) << 40}).reshape({2, 1})));
  at::Tensor h = f.read("h");
  EXPECT_EQ(h.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(h.to(at::kFloat), at::tensor({1.0f, -3.0f})));
  EXPECT_EQ(f.read("s").dim(), 0);
  EXPECT_EQ(f.read("s").item<float>(), 0.25f);
  const TensorInfo& ti = f.info("b");
  EXPECT_EQ(ti.dtype, at::kFloat);
  EXPECT_EQ(ti.begin, 8 + header.size() + 12);  // absolute offsets
  EXPECT_EQ(ti.end, 8 + header.size() + 20);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(Safetensors, RoundTripsEveryDtypeBitExactly) {
  std::string d = safetensors_dir("roundtrip");
  std::string p = d + "/t.safetensors";
  at::manual_seed(0);
  std::vector<std::pair<std::string, at::Tensor>> ts = {
      {"f32", at::randn({3, 4})},
      {"bf16", at::randn({5, 2}).to(at::kBFloat16)},
      {"f16", at::randn({2, 3, 2}).to(at::kHalf)},
      {"f64", at::randn({4}, at::kDouble)},
      {"i64", at::arange(-3, 4, at::kLong)},
      {"i32", at::arange(-2, 3, at::kInt)},
      {"i16", at::arange(-2, 3, at::kShort)},
      {"i8", at::arange(-2, 3, at::kChar)},
      {"u8", at::arange(250, 256, at::kInt).to(at::kByte)},
      {"bool", at::tensor({1, 0, 1}).to(at::kBool)},
      {"empty", at::zeros({0, 4})},
      {"scalar", at::tensor(3.5f).reshape({})},
      {"strided", at::randn({4, 6}).t()},  // non-contiguous input
  };
  // NaN and infinities must survive as bits, not be canonicalised.
  ts[0].second[0][0] = std::numeric_limits<float>::quiet_NaN();
  ts[0].second[0][1] = -std::numeric_limits<float>::infinity();
  write_safetensors(p, ts, {{"format", "pt"}, {"note", "héllo \"quoted\""}});
  SafetensorsFile f(p);
  EXPECT_EQ(f.keys().size(), ts.size());
  for (const auto& [name, t] : ts) {
    at::Tensor r = f.read(name);
    EXPECT_EQ(r.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(r.sizes(), t.sizes()) << name;
    // Compare bits: at::equal is false for NaN == NaN.
    // (An empty tensor has no data pointer to compare: memcmp's arguments must not be null.)
    if (t.numel() > 0)
      EXPECT_EQ(std::memcmp(r.data_ptr(), t.contiguous().data_ptr(), t.numel() * t.element_size()), 0) << name;
    if (name != "f32") EXPECT_TRUE(at::equal(r, t)) << name;
  }
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "héllo \"quoted\"");
}

TEST(Safetensors, WrittenFileParsedByHand) {
  std::string d = safetensors_dir("byhand");
  std::string p = d + "/t.safetensors";
  std::vector<std::pair<std::string, at::Tensor>> ts = {
      {"z", at::arange(5, at::kFloat)},  // 20 bytes: the next offset is not 8-aligned
      {"a", at::arange(6, at::kShort).reshape({2, 3})},
      {"e", at::zeros({0})},
      {"bf", at::tensor({1.0f, -2.0f}).to(at::kBFloat16)},
  };
  write_safetensors(p, ts);
  std::string file = read_file(p);
  ASSERT_GE(file.size(), 8u);
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "the data buffer must start 8-byte aligned";
  ASSERT_LE(8 + n, file.size());
  std::string h = file.substr(8, n);
  // Padding, if any, is spaces after the JSON's closing brace.
  EXPECT_EQ(h.front(), '{');
  EXPECT_EQ(h.find_first_not_of(' ', h.rfind('}') + 1), std::string::npos);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(h);
  EXPECT_FALSE(j.contains("__metadata__")) << "no metadata was given";
  // Entries in the given order, offsets consecutive from 0, data buffer exactly filled.
  std::vector<std::string> order;
  for (auto it = j.begin(); it != j.end(); ++it) order.push_back(it.key());
  EXPECT_EQ(order, (std::vector<std::string>{"z", "a", "e", "bf"}));
  uint64_t expected_begin = 0;
  for (const auto& [name, t] : ts) {
    const auto& e = j[name];
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.sizes().vec()) << name;
    EXPECT_EQ(e["data_offsets"][0].get<uint64_t>(), expected_begin) << name;
    uint64_t bytes = t.numel() * t.element_size();
    EXPECT_EQ(e["data_offsets"][1].get<uint64_t>(), expected_begin + bytes) << name;
    EXPECT_EQ(file.compare(8 + n + expected_begin, bytes,
                           static_cast<const char*>(t.data_ptr()), bytes), 0) << name;
    expected_begin += bytes;
  }
  EXPECT_EQ(j["z"]["dtype"], "F32");
  EXPECT_EQ(j["a"]["dtype"], "I16");
  EXPECT_EQ(j["bf"]["dtype"], "BF16");
  EXPECT_EQ(file.size(), 8 + n + expected_begin);
  // BF16 is stored as raw bits: 1.0 = 0x3F80, -2.0 = 0xC000.
  uint16_t bits[2];
  std::memcpy(bits, file.data() + 8 + n + j["bf"]["data_offsets"][0].get<uint64_t>(), 4);
  EXPECT_EQ(bits[0], 0x3F80);
  EXPECT_EQ(bits[1], 0xC000);
}

TEST(Safetensors, ReadRowsEqualsNarrow) {
  std::string d = safetensors_dir("rows");
  std::string p = d + "/r.safetensors";
  at::manual_seed(1);
  at::Tensor w = at::randn({6, 3, 2});
  at::Tensor v = at::randn({7}).to(at::kBFloat16);
  at::Tensor z = at::zeros({5, 0});
  write_safetensors(p, {{"v", v}, {"w", w}, {"z", z}});
  SafetensorsFile f(p);
  for (auto [start, count] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 6}, {2, 3}, {5, 1}, {4, 0}, {6, 0}, {0, 1}})
    EXPECT_TRUE(at::equal(f.read_rows("w", start, count), f.read("w").narrow(0, start, count)))
        << start << "+" << count;
  EXPECT_TRUE(at::equal(f.read_rows("w", 1, 4), w.narrow(0, 1, 4)));
  EXPECT_TRUE(at::equal(f.read_rows("v", 3, 4), v.narrow(0, 3, 4)));
  EXPECT_EQ(f.read_rows("v", 3, 4).scalar_type(), at::kBFloat16);
  EXPECT_EQ(f.read_rows("z", 1, 3).sizes(), (std::vector<int64_t>{3, 0}));
  for (auto [start, count] : std::vector<std::pair<int64_t, int64_t>>{
           {4, 3}, {-1, 1}, {0, -1}, {7, 0}, {std::numeric_limits<int64_t>::max(), 2}}) {
    try {
      f.read_rows("w", start, count);
      ADD_FAILURE() << "rows " << start << "+" << count << " accepted";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[6, 3, 2]"), std::string::npos) << msg;
    }
  }
  write_safetensors(p, {{"s", at::tensor(1.0f).reshape({})}});
  EXPECT_THROW(SafetensorsFile(p).read_rows("s", 0, 1), Error);
}

struct BadCase {
  const char* what;
  std::string header;
  std::string data;
  std::string word;  // expected in the message
};

TEST(Safetensors, BadFilesNameThePathAndProblem) {
  std::string d = safetensors_dir("bad");
  std::string p = d + "/bad.safetensors";

  std::ofstream(p, std::ios::binary) << "abc";
  expect_open_error(p, "truncated");
  write_raw(p, "{}", "", 1000);
  expect_open_error(p, "past the end of file");
  write_raw(p, "{}", "", ~uint64_t(1));  // 2^64 - 2: must not wrap around the size check
  expect_open_error(p, "past the end of file");

  const std::vector<BadCase> cases = {
      {"not JSON", "{not json", "", "JSON"},
      {"not an object", "[1, 2]", "", "object"},
      {"unknown dtype", R"({"a":{"dtype":"F9","shape":[1],"data_offsets":[0,4]}})",
       floats({1}), "unknown dtype 'F9'"},
      {"missing field", R"({"a":{"dtype":"F32","shape":[1]}})", floats({1}), "data_offsets"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
       floats({1}), "size mismatch"},
      {"shape overflow",
       R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "",
       "size mismatch"},
      {"past the end", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       floats({1}), "out of range"},
      {"reversed", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", floats({1}),
       "reversed"},
      {"negative offset", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
       floats({1}), "data_offsets"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       floats({1, 2}), "overlap"},
      // An empty tensor sorted between two overlapping ones must not hide the overlap.
      {"overlap around an empty tensor",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       floats({1, 2}), "overlap"},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       floats({1}), "non-negative"},
      {"fractional dim", R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
       floats({1}), "non-negative integers"},
      {"metadata value", R"({"__metadata__":{"k":1}})", "", "__metadata__"},
      {"metadata type", R"({"__metadata__":[]})", "", "__metadata__"},
      // Found by fuzzing: nlohmann throws out_of_range, not parse_error, for this.
      {"number beyond double", R"({"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", floats({1}),
       "header is not valid JSON"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    write_raw(p, c.header, c.data);
    expect_open_error(p, c.word);
  }
  // Key-specific problems also name the key.
  write_raw(p, R"({"my.weight":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}})", floats({1}));
  expect_open_error(p, "'my.weight'");

  expect_open_error(d + "/does_not_exist.safetensors", "cannot open");
  expect_open_error(d, "not a regular file");

  write_raw(p, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({1}));
  SafetensorsFile ok(p);
  for (auto call : {+[](const SafetensorsFile& f) { f.read("missing_key"); },
                    +[](const SafetensorsFile& f) { f.info("missing_key"); },
                    +[](const SafetensorsFile& f) { f.read_rows("missing_key", 0, 1); }}) {
    try {
      call(ok);
      ADD_FAILURE() << "missing key accepted";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("missing_key"), std::string::npos) << msg;
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
    }
  }
}

TEST(Safetensors, DtypeNames) {
  for (const char* n : {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"})
    EXPECT_EQ(safetensors_dtype_name(safetensors_dtype(n, "test")), n);
  EXPECT_EQ(safetensors_dtype("BF16", "test"), at::kBFloat16);
  EXPECT_THROW(safetensors_dtype("f32", "test"), Error);  // names are case-sensitive
  EXPECT_THROW(safetensors_dtype_name(at::kComplexFloat), Error);
}

// libtorch 1.13 has no float8: F8_E4M3 and F8_E8M0 read as raw bytes, told from U8 by
// TensorInfo::stored_dtype; io/quantized.h decodes them.
TEST(Safetensors, Float8DtypesReadAsRawCodes) {
  std::string d = safetensors_dir("f8");
  std::string p = d + "/f8.safetensors";
  write_raw(p,
            R"({"w":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,4]},)"
            R"("s":{"dtype":"F8_E8M0","shape":[3],"data_offsets":[4,7]},)"
            R"("u":{"dtype":"U8","shape":[1],"data_offsets":[7,8]},)"
            R"("f":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            bytes_of<uint8_t>({0x38, 0x7E, 0x80, 0xFF, 0, 127, 254, 9}) + floats({2}));
  SafetensorsFile f(p);
  EXPECT_EQ(f.info("w").stored_dtype, "F8_E4M3");
  EXPECT_EQ(f.info("s").stored_dtype, "F8_E8M0");
  EXPECT_EQ(f.info("u").stored_dtype, "U8");
  EXPECT_EQ(f.info("f").stored_dtype, "F32");
  EXPECT_EQ(f.info("w").dtype, at::kByte);
  at::Tensor w = f.read("w");
  EXPECT_EQ(w.scalar_type(), at::kByte);
  at::Tensor want = at::tensor({0x38, 0x7E, 0x80, 0xFF}, at::kInt).to(at::kByte).view({2, 2});
  EXPECT_TRUE(at::equal(w, want));
  EXPECT_TRUE(at::equal(f.read_rows("w", 1, 1), w.narrow(0, 1, 1)));
  EXPECT_TRUE(at::equal(f.read("s"), at::tensor({0, 127, 254}, at::kInt).to(at::kByte)));
  // One byte per element: a size mismatch is caught as for any dtype.
  write_raw(p, R"({"w":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[0,4]}})", floats({1}));
  expect_open_error(p, "size mismatch");
  // The unknown-dtype message lists them; a kByte tensor is still written as U8.
  write_raw(p, R"({"w":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", floats({1}));
  expect_open_error(p, "F8_E4M3 or F8_E8M0");
  EXPECT_EQ(safetensors_dtype("F8_E4M3", "test"), at::kByte);
  EXPECT_EQ(safetensors_dtype("F8_E8M0", "test"), at::kByte);
  EXPECT_EQ(safetensors_dtype_name(at::kByte), "U8");
  write_safetensors(p, {{"b", at::ones({2}, at::kByte)}});
  EXPECT_EQ(SafetensorsFile(p).info("b").stored_dtype, "U8");
}

TEST(Safetensors, FailedWriteLeavesOldFileAndNoTemp) {
  std::string d = safetensors_dir("atomic");
  std::string p = d + "/w.safetensors";
  write_safetensors(p, {{"a", at::ones({2})}});
  const std::string before = read_file(p);
  auto expect_write_error = [&](const std::vector<std::pair<std::string, at::Tensor>>& ts,
                                const std::string& word) {
    try {
      write_safetensors(p, ts);
      ADD_FAILURE() << "write accepted; expected an error about " << word;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find(word), std::string::npos) << msg;
    }
    EXPECT_EQ(read_file(p), before);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename());
    EXPECT_EQ(names, std::vector<std::string>{"w.safetensors"});
  };
  expect_write_error({{"a", at::ones({2})}, {"a", at::ones({1})}}, "duplicate");
  expect_write_error({{"ok", at::ones({2})}, {"c", at::ones({2}, at::kComplexFloat)}}, "'c'");
  expect_write_error({{"__metadata__", at::ones({2})}}, "__metadata__");
  expect_write_error({{"u", at::Tensor()}}, "undefined");
  // A successful write replaces the content and leaves no temp file either.
  write_safetensors(p, {{"b", at::zeros({3})}});
  EXPECT_EQ(SafetensorsFile(p).keys(), std::vector<std::string>{"b"});
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);
}

// A file written in place, cut short or replaced while it is open is caught at the next
// read (and by check_unchanged), naming the file and what happened.
TEST(Safetensors, FileChangedOnDiskWhileOpenIsAnError) {
  const std::string d = safetensors_dir("changed");
  const std::string p = d + "/w.safetensors";
  const at::Tensor a = at::arange(4, at::kFloat), b = at::ones({2});
  // The kernel's file times tick every few milliseconds: each change below lands in a
  // later tick than the write before it.
  auto tick = [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
  write_safetensors(p, {{"a", a}, {"b", b}});
  tick();
  {
    SafetensorsFile f(p);
    EXPECT_TRUE(at::equal(f.read("a"), a));
    f.check_unchanged();  // nothing changed: no error
    {  // one byte of the last tensor overwritten in place, the size unchanged
      std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
      io.seekp(-1, std::ios::end);
      io.put('\x3f');
    }
    glint::testing::expect_error_naming([&] { f.read("b"); },
                                        p + ": changed on disk while it was being read (it was written to)");
    glint::testing::expect_error_naming([&] { f.check_unchanged(); }, p + ": changed on disk");
  }
  tick();
  {
    SafetensorsFile f(p);  // opened again: one version, readable
    f.read("b");
    const uint64_t size = fs::file_size(p);
    fs::resize_file(p, size - 4);
    glint::testing::expect_error_naming([&] { f.read("a"); },
                                        "its size went from " + std::to_string(size) + " to " +
                                            std::to_string(size - 4) + " bytes");
  }
  write_safetensors(p, {{"a", a}, {"b", b}});
  tick();
  {
    SafetensorsFile f(p);
    f.read("a");
    write_safetensors(p, {{"a", a + 1}, {"b", b}});  // a new file renamed over the path
    glint::testing::expect_error_naming([&] { f.read("b"); }, "another file was put in its place");
  }
  {
    SafetensorsFile f(p);
    f.read("a");
    fs::remove(p);
    glint::testing::expect_error_naming([&] { f.check_unchanged(); }, "it was removed");
  }
}

}  // namespace
}  // namespace glint
