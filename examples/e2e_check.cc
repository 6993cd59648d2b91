// e2e_check: the checks of examples/e2e_test.sh that need the checkpoint library.
//
//   e2e_check ckpt-info CKPT
//       prints "step=S world=W" of the checkpoint (a directory or a root's latest)
//   e2e_check export-compare CKPT SLOT OUT.safetensors
//       exports SLOT with ExportSafetensors (f32), reads the file back with the safetensors
//       reader, and compares every parameter bit for bit with the slot's shards read from the
//       rank files through CheckpointReader; also checks the "slot" metadata
//   e2e_check metrics-compare STRAIGHT.jsonl RESUMED.jsonl FROM_STEP RTOL
//       RESUMED must hold steps 1..N once each, N equal to STRAIGHT's; the losses of steps after
//       FROM_STEP must match STRAIGHT's within RTOL (relative), showing the resumed run continued
//       the same trajectory rather than restarting
//
// Exit code 0 when the check holds; otherwise the failure is printed and the exit code is 1 (or
// the ExitCodeFor of a library error).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/directory.h"
#include "checkpoint/export.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "framework/status.h"

namespace shardema {
namespace {

Status CkptInfo(const std::string& ckpt) {
  ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(ckpt));
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  std::printf("step=%lld world=%d\n", static_cast<long long>(m.step), m.world_size);
  return Status::Ok();
}

Status ExportCompare(const std::string& ckpt, const std::string& slot, const std::string& out) {
  ASSIGN_OR_RETURN(ExportReport report, ExportSafetensors(ckpt, slot, DType::kF32, out));
  if (report.files.size() != 1)
    return Internal("expected one exported file, got ", report.files.size());
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(report.files[0]));
  auto meta = file->header().metadata.find("slot");
  if (meta == file->header().metadata.end() || meta->second != slot) {
    return Internal("export '", report.files[0], "': __metadata__.slot is not '", slot, "'");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(ckpt));
  const Manifest& m = reader->manifest();
  const int slot_index = m.FindSlot(slot);
  if (slot_index < 0) return NotFound("checkpoint has no slot '", slot, "'");
  size_t tensors = 0;
  int64_t elements = 0;
  for (size_t u = 0; u < m.layout.units().size(); ++u) {
    for (const ParamLayout& p : m.layout.units()[u].params) {
      std::vector<float> want(size_t(p.numel)), got(size_t(p.numel));
      RETURN_IF_ERROR(
          reader->ReadUnitRange(slot_index, u, p.offset, p.offset + p.numel, want.data()));
      const SafetensorsTensor* t = file->Find(p.name);
      if (t == nullptr) return NotFound("export lacks '", p.name, "'");
      if (t->shape != p.shape || t->dtype != "F32") {
        return Internal("export '", p.name, "': ", t->dtype, ShapeToString(t->shape), " vs F32",
                        ShapeToString(p.shape));
      }
      RETURN_IF_ERROR(file->ReadTensor(p.name, DType::kF32, got.data(), p.numel));
      if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) {
        return Internal("export '", p.name, "' differs from the checkpoint's shards");
      }
      ++tensors;
      elements += p.numel;
    }
  }
  if (tensors != file->header().tensors.size()) {
    return Internal("export has ", file->header().tensors.size(), " tensors, the model ", tensors);
  }
  std::printf("export-compare: slot %s step %lld: %zu tensors, %lld elements bit-identical\n",
              slot.c_str(), static_cast<long long>(report.step), tensors,
              static_cast<long long>(elements));
  return Status::Ok();
}

StatusOr<std::map<int64_t, std::vector<double>>> StepLosses(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open '", path, "'");
  std::map<int64_t, std::vector<double>> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) return DataLoss("'", path, "': bad line: ", line);
    if (j.contains("loss")) out[j["step"].get<int64_t>()].push_back(j["loss"].get<double>());
  }
  return out;
}

Status MetricsCompare(const std::string& straight, const std::string& resumed, int64_t from,
                      double rtol) {
  ASSIGN_OR_RETURN(auto a, StepLosses(straight));
  ASSIGN_OR_RETURN(auto b, StepLosses(resumed));
  if (a.empty() || a.size() != b.size()) {
    return Internal("'", straight, "' has ", a.size(), " steps, '", resumed, "' ", b.size());
  }
  double worst = 0;
  int64_t expect = 1;
  for (const auto& [step, losses] : b) {
    if (step != expect++ || losses.size() != 1) {
      return Internal("'", resumed, "': step ", step, " appears ", losses.size(),
                      " time(s) or out of order");
    }
    if (step <= from) continue;
    const double x = losses[0], y = a.at(step).at(0);
    const double rel = std::fabs(x - y) / std::max(std::fabs(y), 1e-12);
    worst = std::max(worst, rel);
    if (!(rel <= rtol)) {
      return Internal("step ", step, ": resumed loss ", x, " vs straight ", y, " (relative ", rel,
                      " > ", rtol, ")");
    }
  }
  std::printf(
      "metrics-compare: %zu steps, losses after step %lld within %.3g (max %.3g); first "
      "resumed loss %.6g (step 1: %.6g)\n",
      b.size(), static_cast<long long>(from), rtol, worst, b.at(from + 1).at(0), b.at(1).at(0));
  return Status::Ok();
}

int Main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  Status st;
  if (cmd == "ckpt-info" && argc == 3) {
    st = CkptInfo(argv[2]);
  } else if (cmd == "export-compare" && argc == 5) {
    st = ExportCompare(argv[2], argv[3], argv[4]);
  } else if (cmd == "metrics-compare" && argc == 6) {
    st = MetricsCompare(argv[2], argv[3], std::atoll(argv[4]), std::atof(argv[5]));
  } else {
    std::fprintf(stderr,
                 "usage: e2e_check ckpt-info CKPT | export-compare CKPT SLOT OUT | "
                 "metrics-compare STRAIGHT RESUMED FROM_STEP RTOL\n");
    return 2;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "e2e_check %s: %s\n", cmd.c_str(), st.ToString().c_str());
    return st.code() == StatusCode::kInternal ? 1 : ExitCodeFor(st);
  }
  return 0;
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) { return shardema::Main(argc, argv); }
