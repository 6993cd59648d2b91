#include "checkpoint/safetensors.h"

#include <cstring>

#include <gtest/gtest.h>

#include "checkpoint/posix_file.h"
#include "checkpoint/test_util.h"

namespace shardema {
namespace {

std::string LengthPrefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out;
}

// A file from a raw header text and `data_bytes` bytes of data.
std::string WriteRaw(const std::string& dir, const std::string& name, const std::string& header,
                     size_t data_bytes, uint64_t declared = ~0ull) {
  const std::string path = JoinPath(dir, name);
  std::string bytes = LengthPrefix(declared == ~0ull ? header.size() : declared) + header +
                      std::string(data_bytes, '\x01');
  EXPECT_TRUE(WriteFileAtomic(path, bytes, false).ok());
  return path;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ckpt_test::NewTempDir("st"); }
  void TearDown() override { RemoveTree(dir_).IgnoreError(); }
  Status OpenRaw(const std::string& header, size_t data_bytes, uint64_t declared = ~0ull) {
    return SafetensorsFile::Open(WriteRaw(dir_, "t.safetensors", header, data_bytes, declared))
        .status();
  }
  std::string dir_;
};

TEST_F(SafetensorsTest, WriterHeaderRoundTripsThroughReader) {
  std::vector<SafetensorsTensor> t = {
      {"a", "F32", {2, 3}}, {"b", "BF16", {4}}, {"empty", "F32", {0, 5}}, {"s", "F16", {}}};
  const uint64_t data = AssignSafetensorsOffsets(t).value();
  EXPECT_EQ(data, 24u + 8u + 0u + 2u);
  std::string header = BuildSafetensorsHeader(t, {{"format", "pt"}, {"step", "7"}}).value();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(header[size_t(i)])) << (8 * i);
  EXPECT_EQ(n, header.size() - 8);
  EXPECT_EQ(n % 8, 0u);
  // Data: a = 0..5 as f32, b = bf16 of 1..4, s = f16 1.0.
  std::string payload;
  for (int i = 0; i < 6; ++i) {
    float f = float(i);
    payload.append(reinterpret_cast<const char*>(&f), 4);
  }
  for (int i = 1; i <= 4; ++i) {
    uint16_t b = F32ToBF16(float(i));
    payload.append(reinterpret_cast<const char*>(&b), 2);
  }
  uint16_t h = F32ToF16(1.0f);
  payload.append(reinterpret_cast<const char*>(&h), 2);
  const std::string path = JoinPath(dir_, "rt.safetensors");
  ASSERT_TRUE(WriteFileAtomic(path, header + payload, false).ok());

  std::unique_ptr<SafetensorsFile> f = SafetensorsFile::Open(path).value();
  EXPECT_EQ(f->header().metadata.at("step"), "7");
  ASSERT_EQ(f->header().tensors.size(), 4u);
  std::vector<float> a(6);
  ASSERT_TRUE(f->ReadTensor("a", DType::kF32, a.data(), 6).ok());
  EXPECT_EQ(a, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  std::vector<float> b(4);
  ASSERT_TRUE(f->ReadTensor("b", DType::kF32, b.data(), 4).ok());
  EXPECT_EQ(b, (std::vector<float>{1, 2, 3, 4}));
  float s = 0;
  ASSERT_TRUE(f->ReadTensor("s", DType::kF32, &s, 1).ok());
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(f->ReadTensor("a", DType::kF32, a.data(), 5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->ReadTensor("zz", DType::kF32, a.data(), 5).code(), StatusCode::kNotFound);
  EXPECT_EQ(f->Find("empty")->begin, f->Find("empty")->end);
}

TEST_F(SafetensorsTest, BuilderRejectsDuplicatesAndReservedNames) {
  std::vector<SafetensorsTensor> t = {{"a", "F32", {1}}, {"a", "F32", {1}}};
  AssignSafetensorsOffsets(t).status().IgnoreError();
  EXPECT_EQ(BuildSafetensorsHeader(t, {}).status().code(), StatusCode::kInvalidArgument);
  std::vector<SafetensorsTensor> r = {{"__metadata__", "F32", {1}}};
  EXPECT_EQ(BuildSafetensorsHeader(r, {}).status().code(), StatusCode::kInvalidArgument);
  std::vector<SafetensorsTensor> bad = {{"x", "F31", {1}}};
  EXPECT_EQ(AssignSafetensorsOffsets(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsTest, ValidEdgeCasesAreAccepted) {
  EXPECT_TRUE(OpenRaw("{}", 0).ok());
  EXPECT_TRUE(OpenRaw("{\"x\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}   ", 1).ok());
  // Tensors listed out of offset order still tile the buffer.
  EXPECT_TRUE(OpenRaw("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]},"
                      "\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                      3)
                  .ok());
}

TEST_F(SafetensorsTest, EveryRuleViolationIsDataLossNamingTheRule) {
  struct Case {
    std::string header;
    size_t data;
    const char* expect;
  };
  const std::string ok1 = "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  std::vector<Case> cases = {
      {" {" + ok1 + "}", 8, "must start with '{'"},
      {"{" + ok1, 8, "not valid UTF-8 JSON"},
      {"{\"x\":\"\xff\"}", 0, "not valid UTF-8 JSON"},
      {"{" + ok1 + "," + ok1 + "}", 8, "duplicate key 'x'"},
      {"{\"__metadata__\":{\"a\":1}," + ok1 + "}", 8, "expected a string"},
      {"{\"x\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
       "non-negative integer"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8,
       "non-negative integer"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "expected 12"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "data_offsets"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "dtype, shape and data_offsets"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "(gap)"},
      {"{" + ok1 + ",\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
       "(overlap)"},
      {"{" + ok1 + "}", 12, "cover 8 bytes of a 12-byte"},
      {"{" + ok1 + "}", 4, "cover 8 bytes of a 4-byte"},
      {"{\"x\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", 0,
       "overflows"},
  };
  for (const Case& c : cases) {
    Status s = OpenRaw(c.header, c.data);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.header << " -> " << s;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.header << " -> " << s;
    EXPECT_NE(s.message().find("t.safetensors"), std::string::npos) << s;
  }
  Status s = OpenRaw("{}", 0, 100000001);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("not a safetensors file"), std::string::npos) << s;
  EXPECT_NE(s.message().find("100000001"), std::string::npos) << s;
  s = OpenRaw("{}", 0, 64);
  EXPECT_NE(s.message().find("not a safetensors file"), std::string::npos) << s;
  // Another file (here a JSON index) is named as such, with the hint for sharded exports.
  const std::string json = JoinPath(dir_, "model.safetensors.index.json");
  ASSERT_TRUE(
      WriteFileAtomic(json, "{\"metadata\": {\"total_size\": 8}, \"weight_map\": {}}\n", false)
          .ok());
  s = SafetensorsFile::Open(json).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("not a safetensors file"), std::string::npos) << s;
  EXPECT_NE(s.message().find(".safetensors.index.json"), std::string::npos) << s;
  const std::string tiny = JoinPath(dir_, "tiny");
  ASSERT_TRUE(WriteFileAtomic(tiny, "abc", false).ok());
  EXPECT_EQ(SafetensorsFile::Open(tiny).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(SafetensorsFile::Open(JoinPath(dir_, "none")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardema
