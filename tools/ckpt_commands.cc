#include "tools/ckpt_commands.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/directory.h"
#include "checkpoint/export.h"
#include "checkpoint/format.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/reshard.h"
#include "checkpoint/verify.h"
#include "ema/posthoc.h"
#include "framework/byte_size.h"
#include "fsdp/slot_names.h"
#include "tools/checkpoint_diff.h"
#include "tools/checkpoint_summary.h"
#include "tools/progress.h"

namespace shardema::tools {
namespace {

using json = nlohmann::json;

// Bytes of tensor data an export of `slot` writes (parameters and the buffers it would include).
uint64_t ExportBytes(const Manifest& m, const std::string& slot, DType dtype,
                     bool include_buffers) {
  uint64_t bytes = uint64_t(m.layout.total_numel()) * DTypeSize(dtype);
  if (!include_buffers) return bytes;
  for (const BufferEntry& b : m.buffers) {
    if (BufferBelongsTo(b.name, "") || BufferBelongsTo(b.name, slot)) {
      bytes += b.bytes / DTypeSize(b.dtype) * DTypeSize(dtype);
    }
  }
  return bytes;
}

// Total size of the rank files of `m`'s checkpoint at world size `world`.
uint64_t ReshardBytes(const Manifest& m, int world) {
  StatusOr<StoreLayout> layout = m.layout.WithWorldSize(world);
  if (!layout.ok()) return 0;
  std::vector<SlotEntry> slots;
  for (const SlotEntry& s : m.slots) slots.push_back(SlotEntry{s.name, s.dtype, s.params});
  std::vector<BufferEntry> buffers;
  for (const BufferEntry& b : m.buffers)
    buffers.push_back(BufferEntry{b.name, b.shape, b.dtype, 0, 0});
  StatusOr<Manifest> plan = Manifest::Plan(m.step, *layout, slots, buffers, m.meta, m.chunk_bytes);
  if (!plan.ok()) return 0;
  uint64_t total = 0;
  for (int r = 0; r < world; ++r) total += plan->RankFileBytes(r);
  return total;
}

json ValuesJson(const ValueDifference& v) {
  return {{"elements", v.elements}, {"different", v.different},   {"max_abs", v.max_abs},
          {"max_rel", v.max_rel},   {"max_abs_at", v.max_abs_at}, {"a_at_max", v.a_at_max},
          {"b_at_max", v.b_at_max}};
}

json ComparisonJson(const CheckpointComparison& c) {
  json j = {{"identical", c.identical()},
            {"a", c.dir_a},
            {"b", c.dir_b},
            {"step_a", c.step_a},
            {"step_b", c.step_b},
            {"world_a", c.world_a},
            {"world_b", c.world_b},
            {"model_differences", c.model_differences},
            {"meta_differences", c.meta_differences},
            {"notes", c.notes},
            {"slots_only", c.slots_only}};
  j["slots"] = json::array();
  for (const SlotComparison& s : c.slots) {
    json e = {{"name", s.name}, {"in_a", s.in_a}, {"in_b", s.in_b}, {"identical", s.identical()}};
    if (s.in_a) e["dtype_a"] = DTypeName(s.dtype_a);
    if (s.in_b) e["dtype_b"] = DTypeName(s.dtype_b);
    if (s.compared) e["values"] = ValuesJson(s.values);
    j["slots"].push_back(e);
  }
  j["buffers"] = json::array();
  for (const BufferComparison& b : c.buffers) {
    json e = {{"name", b.name}, {"in_a", b.in_a}, {"in_b", b.in_b}, {"identical", b.identical()}};
    if (!b.mismatch.empty()) e["mismatch"] = b.mismatch;
    if (b.compared) e["values"] = ValuesJson(b.values);
    j["buffers"].push_back(e);
  }
  return j;
}

Status VerifyOne(const std::string& dir, const CommandIo& io) {
  uint64_t total = 0;
  if (StatusOr<Manifest> m = ReadManifest(dir); m.ok()) {
    for (const FileEntry& f : m->files) total += f.bytes;
  }
  ProgressBar bar("verify " + BaseName(dir), total, io.err, io.progress);
  StatusOr<VerifiedCheckpoint> v = NotFound("not run");
  RETURN_IF_ERROR(RunWithIoProgress(IoCounter::kRead, &bar, [&] {
    v = VerifyCheckpoint(dir);
    return v.status();
  }));
  *io.out << "OK  " << v->dir << "  step " << v->step << ", " << v->world_size << " rank files, "
          << FormatBytes(v->bytes) << " verified\n";
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> ResolveCheckpointArg(const std::string& dir, std::optional<int64_t> step) {
  if (!step) return ResolveCheckpointDir(dir);
  if (*step < 0) return InvalidArgument("--step ", *step, " is negative");
  return CommittedStepDir(dir, *step);
}

Status Inspect(const InspectOptions& options, const CommandIo& io) {
  ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointArg(options.dir, options.step));
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  ASSIGN_OR_RETURN(const json summary, SummarizeCheckpoint(dir, m));
  if (options.json) {
    *io.out << summary.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    *io.out << FormatSummary(summary);
  }
  return Status::Ok();
}

Status Verify(const VerifyOptions& options, const CommandIo& io) {
  if (!options.all) {
    ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointArg(options.dir, options.step));
    return VerifyOne(dir, io);
  }
  if (options.step) return InvalidArgument("--all and --step exclude each other");
  if (!IsDirectory(options.dir))
    return NotFound("checkpoint root '", options.dir, "' does not exist");
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommittedSteps(options.dir));
  if (steps.empty())
    return NotFound("no committed checkpoint (step_N/manifest.json) in '", options.dir, "'");
  Status first;
  size_t failed = 0;
  for (int64_t s : steps) {
    const std::string dir = JoinPath(options.dir, StepDirName(s));
    Status st = VerifyOne(dir, io);
    if (st.ok()) continue;
    *io.out << "FAILED  " << dir << "\n";
    if (first.ok()) first = st;
    ++failed;
  }
  if (first.ok()) return first;
  return first.WithContext(std::to_string(failed) + " of " + std::to_string(steps.size()) +
                           " checkpoints failed verification; the first");
}

namespace {
// "<dtype>: N tensors, SIZE" and the files written, one per line.
void PrintExportReport(const ExportReport& r, DType dtype, std::ostream& out) {
  out << DTypeName(dtype) << ": " << r.num_tensors << " tensors, " << FormatBytes(r.total_bytes)
      << "\n";
  for (const std::string& f : r.files) out << "  " << f << "\n";
  if (!r.index_file.empty()) out << "  " << r.index_file << "\n";
}
}  // namespace

Status Export(const ExportCommandOptions& options, const CommandIo& io) {
  if (options.out.empty()) return InvalidArgument("export: no output file (-o OUT.safetensors)");
  ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointArg(options.dir, options.step));
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  if (m.FindSlot(options.slot) < 0) {
    std::string names;
    for (const SlotEntry& s : m.slots) names += (names.empty() ? "" : ", ") + s.name;
    return NotFound("slot '", options.slot, "' is not in ", dir, " (slots: ", names, ")");
  }
  // A never-started EMA slot is refused before anything is created (ExportSafetensors refuses it
  // too).
  RETURN_IF_ERROR(CheckSlotStarted(m.meta, options.slot, m.step,
                                   "manifest '" + JoinPath(dir, kManifestName) + "'"));
  if (const std::string parent = DirName(options.out); !IsDirectory(parent))
    RETURN_IF_ERROR(MakeDirs(parent));
  ExportOptions eo;
  eo.max_file_size = options.max_file_size;
  eo.include_buffers = options.include_buffers;
  eo.layout = options.layout;
  ProgressBar bar("export " + options.slot,
                  ExportBytes(m, options.slot, options.dtype, options.include_buffers), io.err,
                  io.progress);
  StatusOr<ExportReport> r = NotFound("not run");
  RETURN_IF_ERROR(RunWithIoProgress(IoCounter::kWrite, &bar, [&] {
    r = ExportSafetensors(dir, options.slot, options.dtype, options.out, eo);
    return r.status();
  }));
  *io.out << "exported slot '" << options.slot << "' of step " << r->step << " (" << dir << ") as ";
  PrintExportReport(*r, options.dtype, *io.out);
  return Status::Ok();
}

Status Reshard(const ReshardCommandOptions& options, const CommandIo& io) {
  if (options.world < 1)
    return InvalidArgument("reshard: --world must be >= 1, got ", options.world);
  if (options.out.empty()) return InvalidArgument("reshard: no output root (-o DIR2)");
  RETURN_IF_ERROR(CheckReshardOutput(options.dir, options.out));
  ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointArg(options.dir, options.step));
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  ProgressBar bar("reshard", ReshardBytes(m, options.world), io.err, io.progress);
  StatusOr<std::string> r = NotFound("not run");
  RETURN_IF_ERROR(RunWithIoProgress(IoCounter::kWrite, &bar, [&] {
    r = ReshardCheckpoint(dir, options.world, options.out);
    return r.status();
  }));
  *io.out << "resharded step " << m.step << " from " << m.world_size << " to " << options.world
          << " ranks: " << *r << " (" << FormatBytes(ReshardBytes(m, options.world)) << ")\n";
  return Status::Ok();
}

StatusOr<bool> Diff(const DiffCommandOptions& options, const CommandIo& io) {
  CompareOptions co;
  std::unique_ptr<ProgressBar> elements_bar;
  co.progress = [&](uint64_t done, uint64_t total) {
    if (!elements_bar)
      elements_bar =
          std::make_unique<ProgressBar>("diff", total, io.err, io.progress, /*bytes=*/false);
    elements_bar->Update(done);
  };
  co.slots_only = options.slots_only;
  ASSIGN_OR_RETURN(std::string a, ResolveCheckpointArg(options.a, options.step_a));
  ASSIGN_OR_RETURN(std::string b, ResolveCheckpointArg(options.b, options.step_b));
  StatusOr<CheckpointComparison> c = CompareCheckpoints(a, b, co);
  if (elements_bar) elements_bar->Finish();
  if (!c.ok()) return c.status();
  if (options.json) {
    *io.out << ComparisonJson(*c).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    *io.out << FormatComparison(*c);
  }
  return c->identical();
}

StatusOr<std::vector<double>> ParseSigmaRelList(const std::string& text) {
  std::vector<double> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const double v = item.empty() ? 0.0 : std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size()) {
      return InvalidArgument("--sigma-rel: '", item, "' in '", text, "' is not a number");
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

Status Posthoc(const PosthocCommandOptions& options, const CommandIo& io, Communicator* comm) {
  if (options.out.empty()) return InvalidArgument("posthoc: no output file (-o OUT.safetensors)");
  const bool printer = comm == nullptr || comm->rank() == 0;
  PosthocOptions po;
  po.sigma_rels = options.sigma_rels;
  po.dtype = options.dtype;
  po.max_file_size = options.max_file_size;
  po.step_max = options.step_max;
  po.include_buffers = options.include_buffers;
  Status made = Status::Ok();
  const std::string parent = DirName(options.out);
  // The folders this call creates (the first missing one on the way to `parent`), removed again
  // when the command fails and they stay empty: a failed run leaves nothing behind.
  std::string created;
  for (std::string d = parent; printer && !d.empty() && d != "/" && d != "." && !PathExists(d);
       d = DirName(d)) {
    created = d;
  }
  if (printer && !IsDirectory(parent)) made = MakeDirs(parent);
  RETURN_IF_ERROR(
      comm == nullptr ? made : AgreeOnStatus(comm, made, "posthoc: creating the output directory"));
  std::vector<ExportReport> reports;
  StatusOr<PosthocPlan> planned =
      ReconstructPosthocEma(options.dir, options.out, po, comm, &reports);
  if (!planned.ok() && !created.empty()) {
    for (std::string d = parent; d.size() >= created.size(); d = DirName(d)) {
      if (::rmdir(d.c_str()) != 0) break;  // not empty: something was written there
    }
  }
  ASSIGN_OR_RETURN(PosthocPlan plan, std::move(planned));
  if (printer && options.print_coefficients) *io.out << FormatPosthocPlan(plan);
  if (!printer) return Status::Ok();
  for (size_t j = 0; j < reports.size(); ++j) {
    const PosthocTarget& t = plan.targets[j];
    char head[256];
    std::snprintf(head, sizeof(head),
                  "post-hoc EMA sigma_rel %g (gamma %.4f, profile fit error %.2e) at step %lld "
                  "from %zu snapshot profiles as ",
                  t.sigma_rel, t.gamma, t.fit_error, (long long)plan.step, plan.inputs.size());
    *io.out << head;
    PrintExportReport(reports[j], options.dtype, *io.out);
    if (t.fit_error > kPoorProfileFit) {
      char warn[320];
      std::snprintf(warn, sizeof(warn),
                    "warning: sigma_rel %g: profile fit error %.2f is above %.2f: the snapshots' "
                    "profiles cannot form this EMA's profile well, so the result is only a rough "
                    "approximation (snapshot slots with a sigma_rel nearer %g would fit better)\n",
                    t.sigma_rel, t.fit_error, kPoorProfileFit, t.sigma_rel);
      *io.out << warn;
    }
  }
  return Status::Ok();
}

}  // namespace shardema::tools
