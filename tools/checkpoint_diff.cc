#include "tools/checkpoint_diff.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "checkpoint/json_diff.h"
#include "checkpoint/lineage.h"
#include "checkpoint/load.h"
#include "checkpoint/reader.h"
#include "checkpoint/slot_values.h"
#include "tools/checkpoint_summary.h"

namespace shardema::tools {
namespace {

// Bits of element i of a raw buffer of `t` (for the bit-exact comparison of equal dtypes).
uint32_t RawBits(const std::vector<char>& raw, DType t, size_t i) {
  if (DTypeSize(t) == 4) {
    uint32_t v;
    std::memcpy(&v, raw.data() + i * 4, 4);
    return v;
  }
  uint16_t v;
  std::memcpy(&v, raw.data() + i * 2, 2);
  return v;
}

// Folds elements [0, n) of two raw buffers into `d`; `where(i)` names element i.
template <typename Where>
void Accumulate(const std::vector<char>& raw_a, DType ta, const std::vector<char>& raw_b, DType tb,
                size_t n, std::vector<float>& fa, std::vector<float>& fb, ValueDifference& d,
                const Where& where) {
  fa.resize(n);
  fb.resize(n);
  ConvertBuffer(raw_a.data(), ta, fa.data(), DType::kF32, n);
  ConvertBuffer(raw_b.data(), tb, fb.data(), DType::kF32, n);
  d.elements += int64_t(n);
  for (size_t i = 0; i < n; ++i) {
    const float a = fa[i], b = fb[i];
    const bool same = ta == tb ? RawBits(raw_a, ta, i) == RawBits(raw_b, tb, i)
                               : (a == b || (std::isnan(a) && std::isnan(b)));
    if (same) continue;
    ++d.different;
    double abs = std::fabs(double(a) - double(b));
    double rel;
    if (std::isnan(abs)) {
      abs = rel = INFINITY;
    } else {
      const double denom = std::max(std::fabs(double(a)), std::fabs(double(b)));
      rel = denom > 0 ? abs / denom : 0.0;
    }
    if (abs > d.max_abs || d.max_abs_at.empty()) {
      d.max_abs = abs;
      d.max_abs_at = where(i);
      d.a_at_max = a;
      d.b_at_max = b;
    }
    d.max_rel = std::max(d.max_rel, rel);
  }
}

// "name[17]" of unit element g.
std::string ElementName(const UnitLayout& u, int64_t g) {
  for (const ParamLayout& p : u.params) {
    if (g >= p.offset && g < p.offset + p.numel)
      return p.name + "[" + std::to_string(g - p.offset) + "]";
  }
  return u.name + "[" + std::to_string(g) + "]";
}

Status CompareSlot(CheckpointReader& ra, int sa, CheckpointReader& rb, int sb,
                   const CompareOptions& options, uint64_t total, uint64_t& done,
                   SlotComparison& out) {
  // EMA slots stored as bf16 or as a delta are compared by their f32 EMA values.
  ASSIGN_OR_RETURN(const EmaStorage ka, SlotStorage(ra, ra.manifest().slots[size_t(sa)].name));
  ASSIGN_OR_RETURN(const EmaStorage kb, SlotStorage(rb, rb.manifest().slots[size_t(sb)].name));
  // Values (not stored bits) for the bf16 storages and for subset slots (untracked = params).
  const bool as_values = ka != EmaStorage::kF32 || kb != EmaStorage::kF32 ||
                         !ra.manifest().slots[size_t(sa)].params.empty() ||
                         !rb.manifest().slots[size_t(sb)].params.empty();
  const DType ta = as_values ? DType::kF32 : ra.manifest().slots[size_t(sa)].dtype;
  const DType tb = as_values ? DType::kF32 : rb.manifest().slots[size_t(sb)].dtype;
  const std::vector<UnitLayout>& units = ra.manifest().layout.units();
  std::vector<char> raw_a, raw_b;
  std::vector<float> fa, fb;
  for (size_t u = 0; u < units.size(); ++u) {
    for (int64_t begin = 0; begin < units[u].numel; begin += options.piece_elements) {
      const int64_t end = std::min(units[u].numel, begin + options.piece_elements);
      const size_t n = size_t(end - begin);
      raw_a.resize(n * DTypeSize(ta));
      raw_b.resize(n * DTypeSize(tb));
      if (as_values) {
        RETURN_IF_ERROR(
            ReadUnitRangeF32(ra, sa, ka, u, begin, end, reinterpret_cast<float*>(raw_a.data())));
        RETURN_IF_ERROR(
            ReadUnitRangeF32(rb, sb, kb, u, begin, end, reinterpret_cast<float*>(raw_b.data())));
      } else {
        RETURN_IF_ERROR(ra.ReadUnitRange(sa, u, begin, end, raw_a.data()));
        RETURN_IF_ERROR(rb.ReadUnitRange(sb, u, begin, end, raw_b.data()));
      }
      Accumulate(raw_a, ta, raw_b, tb, n, fa, fb, out.values,
                 [&](size_t i) { return ElementName(units[u], begin + int64_t(i)); });
      done += n;
      if (options.progress) options.progress(done, total);
    }
  }
  out.compared = true;
  return Status::Ok();
}

std::string ShapeText(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

Status CompareBuffer(CheckpointReader& ra, int ba, CheckpointReader& rb, int bb,
                     BufferComparison& out) {
  const BufferEntry& ea = ra.manifest().buffers[size_t(ba)];
  const BufferEntry& eb = rb.manifest().buffers[size_t(bb)];
  if (ea.shape != eb.shape) {
    out.mismatch = "shape " + ShapeText(ea.shape) + " vs " + ShapeText(eb.shape);
    return Status::Ok();
  }
  if (ea.dtype != eb.dtype)
    out.mismatch = std::string("dtype ") + DTypeName(ea.dtype) + " vs " + DTypeName(eb.dtype);
  std::vector<char> raw_a(ea.bytes), raw_b(eb.bytes);
  RETURN_IF_ERROR(ra.ReadBuffer(ba, raw_a.data()));
  RETURN_IF_ERROR(rb.ReadBuffer(bb, raw_b.data()));
  const size_t n = std::min(ea.bytes / DTypeSize(ea.dtype), eb.bytes / DTypeSize(eb.dtype));
  std::vector<float> fa, fb;
  Accumulate(raw_a, ea.dtype, raw_b, eb.dtype, n, fa, fb, out.values,
             [&](size_t i) { return ea.name + "[" + std::to_string(i) + "]"; });
  out.compared = true;
  return Status::Ok();
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string Presence(bool in_a, bool in_b) {
  return in_a ? (in_b ? "" : "only in a") : "only in b";
}

}  // namespace

bool IsRunLocationKey(const std::string& path) {
  const size_t dot = path.find_last_of('.');
  std::string key = dot == std::string::npos ? path : path.substr(dot + 1);
  for (char& ch : key) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* k : {"ckpt_dir", "data", "eval_data", "init", "source", "metrics"}) {
    if (key == k) return true;
  }
  auto ends_with = [&](const char* suffix) {
    const std::string sfx(suffix);
    return key.size() >= sfx.size() && key.compare(key.size() - sfx.size(), sfx.size(), sfx) == 0;
  };
  return ends_with("dir") || ends_with("path") || ends_with("file");
}

bool CheckpointComparison::identical() const {
  if (!model_differences.empty()) return false;
  for (const SlotComparison& s : slots) {
    if (!s.identical()) return false;
  }
  if (slots_only) return true;
  if (step_a != step_b || !meta_differences.empty()) return false;
  for (const BufferComparison& b : buffers) {
    if (!b.identical()) return false;
  }
  return true;
}

StatusOr<CheckpointComparison> CompareCheckpoints(const std::string& a, const std::string& b,
                                                  const CompareOptions& options) {
  if (options.piece_elements < 1)
    return InvalidArgument("CompareCheckpoints: piece_elements must be >= 1");
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> ra, CheckpointReader::Open(a));
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> rb, CheckpointReader::Open(b));
  const Manifest& ma = ra->manifest();
  const Manifest& mb = rb->manifest();
  CheckpointComparison c;
  c.dir_a = ra->dir();
  c.dir_b = rb->dir();
  c.step_a = ma.step;
  c.step_b = mb.step;
  c.world_a = ma.world_size;
  c.world_b = mb.world_size;
  c.model_differences = LayoutDifferences(ma.layout, mb.layout);
  const bool same_model = c.model_differences.empty();

  for (const SlotEntry& s : ma.slots) {
    SlotComparison sc;
    sc.name = s.name;
    sc.dtype_a = s.dtype;
    const int j = mb.FindSlot(s.name);
    sc.in_b = j >= 0;
    if (sc.in_b) sc.dtype_b = mb.slots[size_t(j)].dtype;
    c.slots.push_back(sc);
  }
  for (const SlotEntry& s : mb.slots) {
    if (ma.FindSlot(s.name) >= 0) continue;
    SlotComparison sc;
    sc.name = s.name;
    sc.in_a = false;
    sc.dtype_b = s.dtype;
    c.slots.push_back(sc);
  }
  uint64_t total = 0, done = 0;
  for (const SlotComparison& sc : c.slots) {
    if (same_model && sc.in_a && sc.in_b) total += uint64_t(ma.layout.total_numel());
  }
  for (SlotComparison& sc : c.slots) {
    if (!same_model || !sc.in_a || !sc.in_b) continue;
    RETURN_IF_ERROR(CompareSlot(*ra, ma.FindSlot(sc.name), *rb, mb.FindSlot(sc.name), options,
                                total, done, sc));
  }

  for (size_t i = 0; i < ma.buffers.size(); ++i) {
    BufferComparison bc;
    bc.name = ma.buffers[i].name;
    const int j = mb.FindBuffer(bc.name);
    bc.in_b = j >= 0;
    if (bc.in_b) RETURN_IF_ERROR(CompareBuffer(*ra, int(i), *rb, j, bc));
    c.buffers.push_back(bc);
  }
  for (const BufferEntry& e : mb.buffers) {
    if (ma.FindBuffer(e.name) >= 0) continue;
    BufferComparison bc;
    bc.name = e.name;
    bc.in_a = false;
    c.buffers.push_back(bc);
  }

  c.slots_only = options.slots_only;
  for (const JsonDifference& d : JsonDiff(ma.meta, mb.meta, "meta")) {
    // Where the run was, which runs wrote it (checkpoint/lineage.h: every run has its own id)
    // and how many ranks (the header compares world sizes): notes.
    const bool location =
        (d.in_a && d.in_b && d.a.is_string() && d.b.is_string() && IsRunLocationKey(d.path)) ||
        d.path.rfind(std::string("meta.") + kLineageSection, 0) == 0;
    const bool world = d.in_a && d.in_b && d.a.is_number_integer() && d.b.is_number_integer() &&
                       d.path.size() >= 11 &&
                       d.path.compare(d.path.size() - 11, 11, ".world_size") == 0;
    (location || world ? c.notes : c.meta_differences).push_back(FormatDifference(d, "a", "b"));
  }
  return c;
}

std::string FormatComparison(const CheckpointComparison& c, size_t max_meta_lines) {
  std::ostringstream o;
  o << FormatTable({{"a", c.dir_a + "  (step " + std::to_string(c.step_a) + ", " +
                              std::to_string(c.world_a) + " ranks)"},
                    {"b", c.dir_b + "  (step " + std::to_string(c.step_b) + ", " +
                              std::to_string(c.world_b) + " ranks)"}},
                   "");
  if (c.step_a != c.step_b) o << "step differs: " << c.step_a << " (a) vs " << c.step_b << " (b)\n";
  if (!c.model_differences.empty()) {
    o << "\nmodels differ (values not compared):\n";
    for (const std::string& d : c.model_differences) o << "  " << d << "\n";
  }

  std::vector<std::vector<std::string>> rows = {
      {"slot", "dtype", "max abs", "max rel", "differing", "largest at (a vs b)"}};
  for (const SlotComparison& s : c.slots) {
    std::string dtype = s.in_a ? DTypeName(s.dtype_a) : DTypeName(s.dtype_b);
    if (s.in_a && s.in_b && s.dtype_a != s.dtype_b)
      dtype = std::string(DTypeName(s.dtype_a)) + "/" + DTypeName(s.dtype_b);
    if (!s.in_a || !s.in_b) {
      rows.push_back({s.name, dtype, "", "", Presence(s.in_a, s.in_b), ""});
    } else if (!s.compared) {
      rows.push_back({s.name, dtype, "", "", "not compared", ""});
    } else {
      const ValueDifference& v = s.values;
      rows.push_back({s.name, dtype, Num(v.max_abs), Num(v.max_rel),
                      std::to_string(v.different) + " / " + std::to_string(v.elements),
                      v.max_abs_at.empty() ? ""
                                           : v.max_abs_at + " (" + Num(v.a_at_max) + " vs " +
                                                 Num(v.b_at_max) + ")"});
    }
  }
  o << "\n" << FormatTable(rows);

  if (!c.buffers.empty()) {
    rows = {{"buffer", "max abs", "max rel", "differing"}};
    for (const BufferComparison& b : c.buffers) {
      if (!b.in_a || !b.in_b) {
        rows.push_back({b.name, "", "", Presence(b.in_a, b.in_b)});
      } else if (!b.compared) {
        rows.push_back({b.name, "", "", b.mismatch});
      } else {
        rows.push_back({b.name, Num(b.values.max_abs), Num(b.values.max_rel),
                        std::to_string(b.values.different) + " / " +
                            std::to_string(b.values.elements) +
                            (b.mismatch.empty() ? "" : ", " + b.mismatch)});
      }
    }
    o << "\n" << FormatTable(rows);
  }

  if (!c.meta_differences.empty() && !c.slots_only) {
    o << "\nmeta differences (" << c.meta_differences.size() << "):\n";
    for (size_t i = 0; i < c.meta_differences.size() && i < max_meta_lines; ++i) {
      o << "  " << c.meta_differences[i] << "\n";
    }
    if (c.meta_differences.size() > max_meta_lines) {
      o << "  ... and " << c.meta_differences.size() - max_meta_lines << " more\n";
    }
  }

  if (!c.notes.empty() && !c.slots_only) {
    o << "\nnotes (run locations, lineages and world sizes, not differences; " << c.notes.size()
      << "):\n";
    for (size_t i = 0; i < c.notes.size() && i < max_meta_lines; ++i)
      o << "  " << c.notes[i] << "\n";
  }

  if (c.identical()) {
    o << "\nidentical" << (c.slots_only ? " slot values" : "");
    if (c.world_a != c.world_b) o << " (world sizes " << c.world_a << " and " << c.world_b << ")";
    o << "\n";
    return o.str();
  }
  std::vector<std::string> what;
  if (c.step_a != c.step_b && !c.slots_only) what.push_back("step");
  if (!c.model_differences.empty()) what.push_back("model");
  size_t slots = 0, buffers = 0;
  for (const SlotComparison& s : c.slots) slots += s.identical() ? 0 : 1;
  for (const BufferComparison& b : c.buffers) buffers += b.identical() || c.slots_only ? 0 : 1;
  if (slots) what.push_back(std::to_string(slots) + (slots == 1 ? " slot" : " slots"));
  if (buffers) what.push_back(std::to_string(buffers) + (buffers == 1 ? " buffer" : " buffers"));
  if (!c.meta_differences.empty() && !c.slots_only) what.push_back("meta");
  o << "\ndifferent:";
  for (size_t i = 0; i < what.size(); ++i) o << (i ? ", " : " ") << what[i];
  o << "\n";
  return o.str();
}

}  // namespace shardema::tools
