// Writes a checkpoint, exports it to safetensors in several ways, and describes what every
// exported tensor must contain (source bits from the test formula, independent of the exporter)
// in expected.json, for testdata/check_safetensors.py (the reference Python reader).
//   export_py_fixture OUT_DIR
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/export.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT
using nlohmann::json;

std::string Hex(const void* data, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

json ExpectedTensors(const SlotSpec& slot, const std::string& buffer_source, int64_t step) {
  StoreLayout l = MakeLayout(TestModel(), 1);
  json out = json::array();
  const uint32_t salt = SlotSalt(slot.name);
  for (size_t u = 0; u < l.units().size(); ++u) {
    for (const ParamLayout& p : l.units()[u].params) {
      std::string bytes;
      for (int64_t i = 0; i < p.numel; ++i) {
        uint32_t bits = ElementBits(salt, u, p.offset + i, step);
        if (slot.dtype == DType::kF32) {
          bytes.append(reinterpret_cast<const char*>(&bits), 4);
        } else {
          uint16_t b = uint16_t(bits >> 16);
          bytes.append(reinterpret_cast<const char*>(&b), 2);
        }
      }
      out.push_back({{"name", p.name},
                     {"shape", p.shape},
                     {"source_dtype", DTypeSafetensorsName(slot.dtype)},
                     {"source_hex", Hex(bytes.data(), bytes.size())}});
    }
  }
  std::vector<float> b = ExpectedBuffer(buffer_source, step);
  out.push_back({{"name", "bn.running_mean"},
                 {"shape", {5}},
                 {"source_dtype", "F32"},
                 {"source_hex", Hex(b.data(), b.size() * 4)}});
  return out;
}

int Run(const std::string& out) {
  std::vector<OwnedState> st = MakeStates(MakeLayout(TestModel(), 3), DefaultSlots(), 42);
  const std::string ckpt = JoinPath(out, "ckpt");
  StatusOr<std::string> saved = SaveAllRanks(ckpt, StatesOf(st));
  if (!saved.ok()) {
    std::fprintf(stderr, "save: %s\n", saved.status().ToString().c_str());
    return 1;
  }
  struct Job {
    std::string dir;
    SlotSpec slot;
    DType dtype;
    uint64_t max_file_size;
    std::string buffer_source;
  };
  const std::vector<Job> jobs = {
      {"ema_f32", {"ema_0.999", DType::kF32}, DType::kF32, 0, "ema_0.999/bn.running_mean"},
      {"params_bf16", {"params", DType::kF32}, DType::kBF16, 0, "bn.running_mean"},
      {"ema_f16_sharded",
       {"ema_0.999", DType::kF32},
       DType::kF16,
       300,
       "ema_0.999/bn.running_mean"},
      {"emabf16_f32", {"ema_bf16", DType::kBF16}, DType::kF32, 0, "bn.running_mean"},
  };
  json expected = json::array();
  for (const Job& j : jobs) {
    const std::string dir = JoinPath(out, j.dir);
    if (!MakeDirs(dir).ok()) return 1;
    ExportOptions o;
    o.max_file_size = j.max_file_size;
    StatusOr<ExportReport> r =
        ExportSafetensors(ckpt, j.slot.name, j.dtype, JoinPath(dir, "model.safetensors"), o);
    if (!r.ok()) {
      std::fprintf(stderr, "export %s: %s\n", j.dir.c_str(), r.status().ToString().c_str());
      return 1;
    }
    json md = {{"format", "pt"}, {"step", "42"}, {"slot", j.slot.name}, {"source", "shardema"}};
    if (j.slot.name == "ema_0.999") {
      md["decay"] = "0.999";
      md["kind"] = "constant";
      md["interval"] = "1";
      // The slot's progress entry (checkpoint/test_util TestMeta).
      md["counters.num_updates"] = "17";
      md["counters.last_update_step"] = "17";
      md["counters.started_at"] = "0";
    }
    expected.push_back({{"files", r->files},
                        {"index", r->index_file},
                        {"dtype", DTypeSafetensorsName(j.dtype)},
                        {"metadata", md},
                        {"tensors", ExpectedTensors(j.slot, j.buffer_source, 42)}});
  }
  return WriteFileAtomic(JoinPath(out, "expected.json"), expected.dump(1), false).ok() ? 0 : 1;
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  return shardema::Run(argv[1]);
}
