#include "examples/dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "examples/test_files.h"
#include "train/train_config.h"

namespace shardema::examples {
namespace {

template <typename T>
RawTensor RawOf(const std::string& dtype, Shape shape, const std::vector<T>& v) {
  return MakeRawTensor<T>(dtype, std::move(shape), v);
}

std::string WriteSafetensors(const std::string& name,
                             const std::map<std::string, RawTensor>& tensors) {
  const std::string path = TestPath(name + ".safetensors");
  Status st = WriteSafetensorsFile(path, tensors);
  EXPECT_TRUE(st.ok()) << st;
  return path;
}

std::vector<float> Iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * float(i);
  return v;
}

TEST(DatasetTest, BatchRowsFollowTheFormula) {
  // Step s uses rows (s*B + j) mod N.
  const int64_t N = 20, B = 8;
  for (int64_t s = 0; s < 12; ++s) {
    for (int64_t j = 0; j < B; ++j) EXPECT_EQ(BatchRow(s, B, j, N), (s * B + j) % N);
  }
  // No overflow for huge steps: (s*B) mod N computed from reduced factors.
  const int64_t big = int64_t(1) << 40;
  EXPECT_EQ(BatchRow(big, 64, 3, 1000), int64_t((__int128(big) * 64 + 3) % 1000));
}

TEST(DatasetTest, RanksSplitEachMicroBatchContiguously) {
  // B = 8 over W = 4 without accumulation: rank r takes j in [2r, 2r+2).
  for (int r = 0; r < 4; ++r) {
    RowSpan s = MicroBatchSpan(8, 1, 0, r, 4);
    EXPECT_EQ(s.begin, 2 * r);
    EXPECT_EQ(s.end, 2 * r + 2);
  }
  // B = 12, K = 3 micro-batches, W = 2: micro k covers [4k, 4k+4), rank r its half.
  std::set<int64_t> covered;
  for (int64_t k = 0; k < 3; ++k) {
    for (int r = 0; r < 2; ++r) {
      RowSpan s = MicroBatchSpan(12, 3, k, r, 2);
      EXPECT_EQ(s.begin, 4 * k + 2 * r);
      EXPECT_EQ(s.size(), 2);
      for (int64_t j = s.begin; j < s.end; ++j) EXPECT_TRUE(covered.insert(j).second);
    }
  }
  EXPECT_EQ(covered.size(), 12u);  // every j exactly once
}

TEST(DatasetTest, EvalSpansCoverAllRowsOnce) {
  for (int world = 1; world <= 5; ++world) {
    int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      RowSpan s = EvalSpan(13, r, world);
      EXPECT_EQ(s.begin, next);
      EXPECT_GE(s.size(), 13 / world);
      next = s.end;
    }
    EXPECT_EQ(next, 13);
  }
}

TEST(DatasetTest, BatchNotDivisibleByWorldIsAnError) {
  StatusOr<ParsedMlpArgs> p =
      ParseMlpConfig(std::vector<std::string>{"--layers", "2,2", "--batch", "6"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->config.CheckForWorld(3).ok());
  Status s = p->config.CheckForWorld(4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--batch 6"), std::string::npos) << s;
}

TEST(DatasetTest, LoadsRegressionDataAndFillsStepBatches) {
  const std::vector<float> x = Iota(5 * 3, 1.f), y = Iota(5 * 2, -0.5f);
  const std::string path =
      WriteSafetensors("reg", {{"x", RawOf("F32", {5, 3}, x)}, {"y", RawOf("F32", {5, 2}, y)}});
  StatusOr<Dataset> d = LoadDataset(path, mlp::Loss::kMse, 3, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rows, 5);
  EXPECT_EQ(d->x, x);
  EXPECT_EQ(d->y, y);
  // Step 2 of batch 4 over 2 ranks: rank 1 takes j = 2, 3 -> rows (8+2)%5 = 0, (8+3)%5 = 1.
  Batch b;
  FillStepBatch(*d, 2, 4, MicroBatchSpan(4, 1, 0, 1, 2), &b);
  ASSERT_EQ(b.rows, 2);
  EXPECT_EQ(std::vector<float>(b.x.begin(), b.x.begin() + 3), std::vector<float>({0, 1, 2}));
  EXPECT_EQ(std::vector<float>(b.x.begin() + 3, b.x.end()), std::vector<float>({3, 4, 5}));
  EXPECT_EQ(b.y, std::vector<float>({0.f, -0.5f, -1.f, -1.5f}));
  FillRowBatch(*d, RowSpan{4, 5}, &b);
  EXPECT_EQ(b.x, std::vector<float>({12, 13, 14}));
}

TEST(DatasetTest, LoadsLabelsAsI64OrI32) {
  const std::vector<float> x = Iota(4 * 2, 1.f);
  for (const char* dtype : {"I64", "I32"}) {
    RawTensor y = std::string(dtype) == "I64" ? RawOf("I64", {4}, std::vector<int64_t>{2, 0, 1, 2})
                                              : RawOf("I32", {4}, std::vector<int32_t>{2, 0, 1, 2});
    const std::string path =
        WriteSafetensors(std::string("ce_") + dtype, {{"x", RawOf("F32", {4, 2}, x)}, {"y", y}});
    StatusOr<Dataset> d = LoadDataset(path, mlp::Loss::kCrossEntropy, 2, 3);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->labels, (std::vector<int64_t>{2, 0, 1, 2}));
  }
}

TEST(DatasetTest, BadFilesAreClearErrors) {
  const std::vector<float> x = Iota(4 * 2, 1.f);
  // Wrong x width: names the file, the tensor, found and expected shapes.
  std::string p = WriteSafetensors(
      "wide", {{"x", RawOf("F32", {4, 2}, x)}, {"y", RawOf("F32", {4, 1}, Iota(4, 1))}});
  StatusOr<Dataset> d = LoadDataset(p, mlp::Loss::kMse, 3, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  for (const std::string& f :
       {p, std::string("'x'"), std::string("[4, 2]"), std::string("[N, 3]")}) {
    EXPECT_NE(d.status().message().find(f), std::string::npos) << f << " in " << d.status();
  }
  // y rows differ from x rows.
  p = WriteSafetensors("rows",
                       {{"x", RawOf("F32", {4, 2}, x)}, {"y", RawOf("F32", {3, 1}, Iota(3, 1))}});
  d = LoadDataset(p, mlp::Loss::kMse, 2, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("'y'"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("[4, 1]"), std::string::npos) << d.status();
  // Float labels for cross_entropy.
  p = WriteSafetensors("flt",
                       {{"x", RawOf("F32", {4, 2}, x)}, {"y", RawOf("F32", {4}, Iota(4, 1))}});
  d = LoadDataset(p, mlp::Loss::kCrossEntropy, 2, 3);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("I64 or I32"), std::string::npos) << d.status();
  // Label out of range names the row.
  p = WriteSafetensors("lbl", {{"x", RawOf("F32", {4, 2}, x)},
                               {"y", RawOf("I64", {4}, std::vector<int64_t>{0, 1, 3, 0})}});
  d = LoadDataset(p, mlp::Loss::kCrossEntropy, 2, 3);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("row 2"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("label 3"), std::string::npos) << d.status();
  // Missing tensor lists what the file has.
  p = WriteSafetensors("noy",
                       {{"x", RawOf("F32", {4, 2}, x)}, {"z", RawOf("F32", {4}, Iota(4, 1))}});
  d = LoadDataset(p, mlp::Loss::kMse, 2, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("'y'"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("x, z"), std::string::npos) << d.status();
  // Missing file.
  d = LoadDataset("/nonexistent/data.safetensors", mlp::Loss::kMse, 2, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("/nonexistent/data.safetensors"), std::string::npos)
      << d.status();
}

TEST(DatasetTest, SyntheticTaskIsDeterministicAndSeedDependent) {
  const std::vector<int64_t> layers = {5, 8, 3};
  Dataset a = MakeSyntheticDataset(1, layers, mlp::Activation::kRelu, mlp::Loss::kMse, 64);
  Dataset b = MakeSyntheticDataset(1, layers, mlp::Activation::kRelu, mlp::Loss::kMse, 64);
  Dataset c = MakeSyntheticDataset(2, layers, mlp::Activation::kRelu, mlp::Loss::kMse, 64);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  EXPECT_NE(a.x, c.x);
  ASSERT_EQ(a.y.size(), 64u * 3);
  // Inputs look standard normal; targets are not constant.
  double mean = 0, var = 0;
  for (float v : a.x) mean += v;
  mean /= double(a.x.size());
  for (float v : a.x) var += (v - mean) * (v - mean);
  var /= double(a.x.size());
  EXPECT_NEAR(mean, 0.0, 0.15);
  EXPECT_NEAR(var, 1.0, 0.2);
  double ymin = 1e9, ymax = -1e9;
  for (float v : a.y) ymin = std::min(ymin, double(v)), ymax = std::max(ymax, double(v));
  EXPECT_GT(ymax - ymin, 0.1);
  // Classification labels use several classes.
  Dataset k =
      MakeSyntheticDataset(3, layers, mlp::Activation::kGelu, mlp::Loss::kCrossEntropy, 256);
  std::set<int64_t> classes(k.labels.begin(), k.labels.end());
  EXPECT_GE(classes.size(), 2u);
  for (int64_t l : k.labels) EXPECT_TRUE(l >= 0 && l < 3);
}

TEST(DatasetTest, NonFiniteValuesAreRefusedNamingTheTensorAndRow) {
  std::vector<float> x = Iota(5 * 2, 1.f), y = Iota(5, 1.f);
  x[2 * 2 + 1] = std::numeric_limits<float>::quiet_NaN();  // x row 2, column 1
  y[4] = -std::numeric_limits<float>::infinity();          // y row 4
  const std::string p =
      WriteSafetensors("nan", {{"x", RawOf("F32", {5, 2}, x)}, {"y", RawOf("F32", {5, 1}, y)}});
  StatusOr<Dataset> d = LoadDataset(p, mlp::Loss::kMse, 2, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  for (const std::string& f : {p, std::string("tensor 'x' row 2 column 1 is nan"),
                               std::string("2 of 5 rows"), std::string("--allow-nonfinite-data")}) {
    EXPECT_NE(d.status().message().find(f), std::string::npos) << f << " in " << d.status();
  }
  // Only y bad: names y.
  x[2 * 2 + 1] = 0.5f;
  const std::string q =
      WriteSafetensors("inf_y", {{"x", RawOf("F32", {5, 2}, x)}, {"y", RawOf("F32", {5, 1}, y)}});
  d = LoadDataset(q, mlp::Loss::kMse, 2, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("tensor 'y' row 4 column 0 is -inf"), std::string::npos)
      << d.status();
  // The cross-entropy path checks x too (BF16 keeps the Inf through the conversion).
  std::vector<uint16_t> xb(4 * 2, 0x3f80);  // 1.0
  xb[3 * 2] = 0x7f80;                       // +inf, row 3
  const std::string c =
      WriteSafetensors("inf_ce", {{"x", RawOf("BF16", {4, 2}, xb)},
                                  {"y", RawOf("I64", {4}, std::vector<int64_t>{0, 1, 2, 0})}});
  d = LoadDataset(c, mlp::Loss::kCrossEntropy, 2, 3);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("tensor 'x' row 3 column 0 is inf"), std::string::npos)
      << d.status();
}

TEST(DatasetTest, AllowNonFiniteSkipsTheRowsAndCountsThem) {
  std::vector<float> x = Iota(5 * 2, 1.f), y = Iota(5, 10.f);
  x[1 * 2] = std::numeric_limits<float>::infinity();  // row 1
  y[3] = std::numeric_limits<float>::quiet_NaN();     // row 3
  const std::string p =
      WriteSafetensors("skip", {{"x", RawOf("F32", {5, 2}, x)}, {"y", RawOf("F32", {5, 1}, y)}});
  DataOptions o;
  o.allow_nonfinite = true;
  StatusOr<Dataset> d = LoadDataset(p, mlp::Loss::kMse, 2, 1, o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rows, 3);
  EXPECT_EQ(d->nonfinite_rows_skipped, 2);
  EXPECT_EQ(d->first_nonfinite_row, 1);
  EXPECT_EQ(d->x, (std::vector<float>{0, 1, 4, 5, 8, 9}));  // rows 0, 2, 4 in order
  EXPECT_EQ(d->y, (std::vector<float>{0, 20, 40}));
  // Labels follow their rows.
  std::vector<float> xc = Iota(4 * 2, 1.f);
  xc[2 * 2 + 1] = std::numeric_limits<float>::quiet_NaN();
  const std::string c =
      WriteSafetensors("skip_ce", {{"x", RawOf("F32", {4, 2}, xc)},
                                   {"y", RawOf("I64", {4}, std::vector<int64_t>{0, 1, 2, 1})}});
  d = LoadDataset(c, mlp::Loss::kCrossEntropy, 2, 3, o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->labels, (std::vector<int64_t>{0, 1, 1}));
  // Nothing left is still an error.
  const std::vector<float> all_nan(2 * 2, std::numeric_limits<float>::quiet_NaN());
  const std::string n = WriteSafetensors(
      "all_nan", {{"x", RawOf("F32", {2, 2}, all_nan)}, {"y", RawOf("F32", {2, 1}, Iota(2, 1))}});
  d = LoadDataset(n, mlp::Loss::kMse, 2, 1, o);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("every one of its 2 rows"), std::string::npos) << d.status();
  // The trainer flag.
  EXPECT_TRUE(ParseTestConfig("--layers 2,1 --allow-nonfinite-data").allow_nonfinite_data);
  EXPECT_FALSE(ParseTestConfig("--layers 2,1").allow_nonfinite_data);
}

}  // namespace
}  // namespace shardema::examples
