#include "examples/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "checkpoint/safetensors.h"
#include "framework/rng.h"
#include "framework/tensor.h"
#include "nn/activation.h"
#include "nn/cpu_context.h"
#include "nn/linear.h"

namespace shardema::examples {
namespace {

bool IsFloatDType(const std::string& d) { return d == "F32" || d == "BF16" || d == "F16"; }

// Finds `name` and checks its dtype is in `dtypes` and its shape matches `want` (-1 = any).
StatusOr<const SafetensorsTensor*> FindChecked(const SafetensorsFile& f, const std::string& name,
                                               bool want_float, const Shape& want,
                                               const std::string& expect_text) {
  const SafetensorsTensor* t = f.Find(name);
  if (t == nullptr) {
    std::string have;
    for (const SafetensorsTensor& x : f.header().tensors)
      have += (have.empty() ? "" : ", ") + x.name;
    return NotFound("data file '", f.path(), "' has no tensor '", name,
                    "' (found: ", have.empty() ? "none" : have, ")");
  }
  const bool dtype_ok =
      want_float ? IsFloatDType(t->dtype) : (t->dtype == "I64" || t->dtype == "I32");
  if (!dtype_ok) {
    return InvalidArgument("data file '", f.path(), "': tensor '", name, "' has dtype ", t->dtype,
                           ", expected ", want_float ? "F32, BF16 or F16" : "I64 or I32");
  }
  bool shape_ok = t->shape.size() == want.size();
  for (size_t i = 0; shape_ok && i < want.size(); ++i) {
    shape_ok = want[i] < 0 || t->shape[i] == want[i];
  }
  if (!shape_ok) {
    return InvalidArgument("data file '", f.path(), "': tensor '", name, "' has shape ",
                           ShapeToString(t->shape), ", expected ", expect_text);
  }
  return t;
}

// Column of the first NaN/Inf in row `r` of a [rows, cols] matrix, or -1.
int64_t FirstNonFinite(const std::vector<float>& m, int64_t cols, int64_t r) {
  for (int64_t c = 0; c < cols; ++c) {
    if (!std::isfinite(m[size_t(r * cols + c)])) return c;
  }
  return -1;
}

// Checks every row of x (and y for mse) for NaN/Inf: an error naming the first, or (allowed)
// drops those rows and counts them.
Status CheckFinite(const std::string& path, bool allow, Dataset* d) {
  const bool has_y = d->loss == mlp::Loss::kMse;
  std::vector<char> bad(size_t(d->rows), 0);
  int64_t count = 0;
  std::string first;
  for (int64_t r = 0; r < d->rows; ++r) {
    const char* tensor = "x";
    int64_t col = FirstNonFinite(d->x, d->in_dim, r);
    float v = col >= 0 ? d->x[size_t(r * d->in_dim + col)] : 0.f;
    if (col < 0 && has_y) {
      tensor = "y";
      col = FirstNonFinite(d->y, d->out_dim, r);
      if (col >= 0) v = d->y[size_t(r * d->out_dim + col)];
    }
    if (col < 0) continue;
    bad[size_t(r)] = 1;
    if (count++ == 0) {
      d->first_nonfinite_row = r;
      first = std::string("tensor '") + tensor + "' row " + std::to_string(r) + " column " +
              std::to_string(col) + " is " +
              (std::isnan(v) ? "nan"
               : v > 0       ? "inf"
                             : "-inf");
    }
  }
  if (count == 0) return Status::Ok();
  if (!allow) {
    return InvalidArgument("data file '", path, "': ", first, " (", count, " of ", d->rows,
                           " rows hold NaN/Inf); fix the data or pass --allow-nonfinite-data to "
                           "skip such rows");
  }
  if (count == d->rows) {
    return InvalidArgument("data file '", path, "': every one of its ", d->rows,
                           " rows holds NaN/Inf (first: ", first, "); nothing left to train on");
  }
  int64_t kept = 0;
  for (int64_t r = 0; r < d->rows; ++r) {
    if (bad[size_t(r)]) continue;
    std::copy_n(d->x.begin() + r * d->in_dim, d->in_dim, d->x.begin() + kept * d->in_dim);
    if (has_y)
      std::copy_n(d->y.begin() + r * d->out_dim, d->out_dim, d->y.begin() + kept * d->out_dim);
    if (!has_y) d->labels[size_t(kept)] = d->labels[size_t(r)];
    ++kept;
  }
  d->rows = kept;
  d->x.resize(size_t(kept * d->in_dim));
  if (has_y) d->y.resize(size_t(kept * d->out_dim));
  if (!has_y) d->labels.resize(size_t(kept));
  d->nonfinite_rows_skipped = count;
  return Status::Ok();
}

}  // namespace

StatusOr<Dataset> LoadDataset(const std::string& path, mlp::Loss loss, int64_t in_dim,
                              int64_t out_dim, const DataOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
  Dataset d;
  d.source = path;
  d.loss = loss;
  d.in_dim = in_dim;
  d.out_dim = out_dim;
  ASSIGN_OR_RETURN(const SafetensorsTensor* x,
                   FindChecked(*f, "x", true, {-1, in_dim},
                               "[N, " + std::to_string(in_dim) + "] (--layers starts with " +
                                   std::to_string(in_dim) + ")"));
  d.rows = x->shape[0];
  if (d.rows < 1) return InvalidArgument("data file '", path, "': tensor 'x' has no rows");
  d.x.resize(size_t(d.rows * in_dim));
  RETURN_IF_ERROR(f->ReadTensor("x", DType::kF32, d.x.data(), int64_t(d.x.size())));
  const std::string n = std::to_string(d.rows);
  if (loss == mlp::Loss::kMse) {
    ASSIGN_OR_RETURN(
        const SafetensorsTensor* y,
        FindChecked(*f, "y", true, {d.rows, out_dim},
                    "[" + n + ", " + std::to_string(out_dim) + "] (rows of x, --layers ends with " +
                        std::to_string(out_dim) + "; --loss mse)"));
    (void)y;
    d.y.resize(size_t(d.rows * out_dim));
    RETURN_IF_ERROR(f->ReadTensor("y", DType::kF32, d.y.data(), int64_t(d.y.size())));
    RETURN_IF_ERROR(CheckFinite(path, options.allow_nonfinite, &d));
    return d;
  }
  ASSIGN_OR_RETURN(
      const SafetensorsTensor* y,
      FindChecked(*f, "y", false, {d.rows}, "[" + n + "] class labels (--loss cross_entropy)"));
  d.labels.resize(size_t(d.rows));
  if (y->dtype == "I64") {
    RETURN_IF_ERROR(f->ReadRaw(*y, 0, uint64_t(d.rows) * 8, d.labels.data()));
  } else {
    std::vector<int32_t> tmp(size_t(d.rows));
    RETURN_IF_ERROR(f->ReadRaw(*y, 0, uint64_t(d.rows) * 4, tmp.data()));
    std::copy(tmp.begin(), tmp.end(), d.labels.begin());
  }
  for (int64_t r = 0; r < d.rows; ++r) {
    if (d.labels[size_t(r)] < 0 || d.labels[size_t(r)] >= out_dim) {
      return InvalidArgument("data file '", path, "': tensor 'y' row ", r, " holds label ",
                             d.labels[size_t(r)], ", outside [0, ", out_dim,
                             ") (--layers ends with ", out_dim, " classes)");
    }
  }
  RETURN_IF_ERROR(CheckFinite(path, options.allow_nonfinite, &d));
  return d;
}

Dataset MakeSyntheticDataset(uint64_t seed, const std::vector<int64_t>& layers,
                             mlp::Activation activation, mlp::Loss loss, int64_t rows) {
  Dataset d;
  d.source = "synthetic(seed=" + std::to_string(seed) + ", rows=" + std::to_string(rows) + ")";
  d.loss = loss;
  d.rows = rows;
  d.in_dim = layers.front();
  d.out_dim = layers.back();
  d.x.resize(size_t(rows * d.in_dim));
  SeededRng xr(seed, "data.x");
  for (float& v : d.x) v = xr.Normal();
  // Teacher forward, layer by layer over all rows.
  const nn::CpuContext serial;
  std::vector<float> h = d.x, z;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    const int64_t in = layers[i], out = layers[i + 1];
    const std::string name = "teacher.layers." + std::to_string(i);
    std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out));
    const double bound = std::sqrt(3.0 / double(in));
    SeededRng wr(seed, name + ".weight"), br(seed, name + ".bias");
    for (float& v : w) v = wr.Uniform(-bound, bound);
    for (float& v : b) v = br.Uniform(-0.1, 0.1);
    z.assign(size_t(rows * out), 0.f);
    nn::LinearForward(serial, h.data(), w.data(), b.data(), rows, in, out, z.data());
    if (i + 2 < layers.size()) {
      h.resize(z.size());
      nn::ActivationForward(serial, activation, z.data(), h.data(), int64_t(z.size()));
    } else {
      h = z;
    }
  }
  if (loss == mlp::Loss::kMse) {
    d.y.assign(h.begin(), h.end());  // not h itself: its capacity is the widest layer's rows
  } else {
    d.labels.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = h.data() + r * d.out_dim;
      d.labels[size_t(r)] = int64_t(std::max_element(row, row + d.out_dim) - row);
    }
  }
  return d;
}

int64_t BatchRow(int64_t step, int64_t batch, int64_t j, int64_t rows) {
  // (step*batch + j) mod rows with every factor reduced first (rows < 2^31 keeps it exact).
  const int64_t base = ((step % rows) * (batch % rows)) % rows;
  return (base + j % rows) % rows;
}

namespace {
void CopyRow(const Dataset& d, int64_t src, int64_t dst, Batch* out) {
  std::memcpy(out->x.data() + dst * d.in_dim, d.x.data() + src * d.in_dim,
              size_t(d.in_dim) * sizeof(float));
  if (d.loss == mlp::Loss::kMse) {
    std::memcpy(out->y.data() + dst * d.out_dim, d.y.data() + src * d.out_dim,
                size_t(d.out_dim) * sizeof(float));
  } else {
    out->labels[size_t(dst)] = d.labels[size_t(src)];
  }
}

void Resize(const Dataset& d, int64_t rows, Batch* out) {
  out->rows = rows;
  out->x.resize(size_t(rows * d.in_dim));
  if (d.loss == mlp::Loss::kMse) {
    out->y.resize(size_t(rows * d.out_dim));
    out->labels.clear();
  } else {
    out->labels.resize(size_t(rows));
    out->y.clear();
  }
}
}  // namespace

void FillStepBatch(const Dataset& d, int64_t step, int64_t batch, RowSpan span, Batch* out) {
  Resize(d, span.size(), out);
  for (int64_t j = span.begin; j < span.end; ++j) {
    CopyRow(d, BatchRow(step, batch, j, d.rows), j - span.begin, out);
  }
}

void FillRowBatch(const Dataset& d, RowSpan span, Batch* out) {
  Resize(d, span.size(), out);
  for (int64_t r = span.begin; r < span.end; ++r) CopyRow(d, r, r - span.begin, out);
}

}  // namespace shardema::examples
