#include "ema/posthoc.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/directory.h"
#include "checkpoint/load.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/reader.h"
#include "checkpoint/slot_values.h"
#include "ema/posthoc_solve.h"
#include "ema/schedule.h"
#include "ema/snapshot.h"
#include "fsdp/param_subset.h"

namespace shardema {

using nlohmann::json;

namespace {

std::string Printf(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string OutputPath(const std::string& out_path, double sigma_rel, size_t n) {
  if (n == 1) return out_path;
  std::string stem = out_path;
  const std::string ext = ".safetensors";
  if (stem.size() > ext.size() && stem.compare(stem.size() - ext.size(), ext.size(), ext) == 0) {
    stem.resize(stem.size() - ext.size());
  }
  return stem + "-sigma_rel_" + Printf("%g", sigma_rel) + ext;
}

Status CheckSigmas(const std::vector<double>& sigmas) {
  if (sigmas.empty()) return InvalidArgument("post-hoc EMA: no sigma_rel given");
  std::set<std::string> seen;
  for (double s : sigmas) {
    RETURN_IF_ERROR(SigmaRelToGamma(s).status().WithContext("post-hoc EMA: --sigma-rel"));
    if (!seen.insert(Printf("%g", s)).second) {
      return InvalidArgument("post-hoc EMA: sigma_rel ", Printf("%g", s), " given twice");
    }
  }
  return Status::Ok();
}

std::map<std::string, std::string> Metadata(const PosthocPlan& plan, const PosthocTarget& target,
                                            const std::vector<std::string>& untracked) {
  json inputs = json::array();
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const PosthocInput& in = plan.inputs[i];
    inputs.push_back({{"step", in.step},
                      {"slot", in.slot},
                      {"t", in.t},
                      {"gamma", in.gamma},
                      {"coefficient", target.coefficients[i]}});
  }
  std::map<std::string, std::string> out = {{"format", "pt"},
                                            {"source", "shardema"},
                                            {"slot", "posthoc"},
                                            {"step", std::to_string(plan.step)},
                                            {"t", std::to_string(plan.t)},
                                            {"sigma_rel", Printf("%.17g", target.sigma_rel)},
                                            {"gamma", Printf("%.17g", target.gamma)},
                                            {"fit_error", Printf("%.6g", target.fit_error)},
                                            {"inputs", inputs.dump()}};
  if (!untracked.empty()) out[kUntrackedMetadataKey] = json(untracked).dump();
  return out;
}

// One reader per snapshot directory an output needs, checked against the target's model.
struct Readers {
  std::map<std::string, std::unique_ptr<CheckpointReader>> by_dir;
  std::vector<CheckpointReader*> per_input;  // null for inputs with a zero coefficient
  std::vector<int> slot_index;
};

// kFailedPrecondition when the snapshot in `dir` is of another model than the target's.
Status CheckSameModel(const StoreLayout& layout, const std::string& dir, const StoreLayout& model,
                      const std::string& target_dir) {
  const std::vector<std::string> diff = LayoutDifferences(layout, model);
  if (diff.empty()) return Status::Ok();
  std::string all;
  for (const std::string& d : diff) all += (all.empty() ? "" : "; ") + d;
  return FailedPrecondition("post-hoc EMA: snapshot '", dir, "' is of another model than '",
                            target_dir, "': ", all);
}

StatusOr<Readers> OpenReaders(const PosthocPlan& plan, const PosthocTarget& target) {
  Readers r;
  ReaderOptions ro;
  ro.cache_chunks = 1;
  ASSIGN_OR_RETURN(r.by_dir[plan.target_dir], CheckpointReader::Open(plan.target_dir, ro));
  const StoreLayout& model = r.by_dir.at(plan.target_dir)->manifest().layout;
  std::set<std::string> unread_checked;
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const PosthocInput& in = plan.inputs[i];
    if (target.coefficients[i] == 0.0) {
      // Never read, but still a snapshot of this model (its manifest only: a damaged rank file of
      // a snapshot the combination does not need fails nothing).
      if (r.by_dir.count(in.dir) == 0 && unread_checked.insert(in.dir).second) {
        ASSIGN_OR_RETURN(Manifest m, ReadManifest(in.dir));
        RETURN_IF_ERROR(CheckSameModel(m.layout, in.dir, model, plan.target_dir));
      }
      r.per_input.push_back(nullptr);
      r.slot_index.push_back(-1);
      continue;
    }
    std::unique_ptr<CheckpointReader>& reader = r.by_dir[in.dir];
    if (reader == nullptr) {
      ASSIGN_OR_RETURN(reader, CheckpointReader::Open(in.dir, ro));
      RETURN_IF_ERROR(CheckSameModel(reader->manifest().layout, in.dir, model, plan.target_dir));
    }
    const int si = reader->manifest().FindSlot(in.slot);
    if (si < 0)
      return DataLoss("post-hoc EMA: snapshot '", in.dir, "' has no slot '", in.slot, "'");
    r.per_input.push_back(reader.get());
    r.slot_index.push_back(si);
  }
  return r;
}

// The values callback: weighted sums of the inputs for parameters, the target's buffers.
class Combiner {
 public:
  Combiner(const PosthocPlan& plan, const PosthocTarget& target, Readers& readers)
      : plan_(plan), target_(target), readers_(readers) {}

  Status operator()(const ExportTensor& t, int64_t b, int64_t n, void* dst, DType* type) {
    CheckpointReader* last = readers_.by_dir.at(plan_.target_dir).get();
    if (t.buffer >= 0) {
      const BufferEntry& e = last->manifest().buffers[size_t(t.buffer)];
      *type = e.dtype;
      const size_t ss = DTypeSize(e.dtype);
      Status s = last->ReadFileRange(0, e.offset + uint64_t(b) * ss, uint64_t(n) * ss, dst);
      last->ReleaseCache();
      return s;
    }
    if (!Tracked(last->manifest().layout, t)) {  // the live weights of the target snapshot
      const int params = last->manifest().FindSlot("params");
      if (params < 0) {
        return DataLoss("post-hoc EMA: snapshot '", plan_.target_dir,
                        "' has no 'params' slot for the parameters its subset slots do not track");
      }
      *type = DType::kF32;
      Status s = last->ReadUnitRange(params, t.unit, t.offset + b, t.offset + b + n, dst);
      last->ReleaseCache();
      return s;
    }
    acc_.assign(size_t(n), 0.0);
    for (size_t i = 0; i < plan_.inputs.size(); ++i) {
      CheckpointReader* r = readers_.per_input[i];
      if (r == nullptr) continue;
      const int si = readers_.slot_index[i];
      const DType sd = r->manifest().slots[size_t(si)].dtype;
      raw_.resize(size_t(n) * DTypeSize(sd));
      Status s = r->ReadUnitRange(si, t.unit, t.offset + b, t.offset + b + n, raw_.data());
      r->ReleaseCache();
      RETURN_IF_ERROR(s);
      const float* x = reinterpret_cast<const float*>(raw_.data());
      if (sd != DType::kF32) {
        f32_.resize(size_t(n));
        ConvertBuffer(raw_.data(), sd, f32_.data(), DType::kF32, size_t(n));
        x = f32_.data();
      }
      const double c = target_.coefficients[i];
      for (int64_t k = 0; k < n; ++k) acc_[size_t(k)] += c * double(x[k]);
    }
    float* out = static_cast<float*>(dst);
    for (int64_t k = 0; k < n; ++k) out[k] = float(acc_[size_t(k)]);
    *type = DType::kF32;
    return Status::Ok();
  }

 private:
  // Whether the parameter tensor t is one the inputs track.
  bool Tracked(const StoreLayout& layout, const ExportTensor& t) const {
    if (plan_.tracked.empty()) return true;
    for (const ParamLayout& p : layout.units()[t.unit].params) {
      if (p.offset == t.offset && p.numel == t.numel) {
        return std::find(plan_.tracked.begin(), plan_.tracked.end(), p.name) != plan_.tracked.end();
      }
    }
    return true;
  }

  const PosthocPlan& plan_;
  const PosthocTarget& target_;
  Readers& readers_;
  std::vector<double> acc_;
  std::vector<char> raw_;
  std::vector<float> f32_;
};

}  // namespace

StatusOr<PosthocPlan> PlanPosthoc(const std::string& root, const std::string& out_path,
                                  const PosthocOptions& options) {
  RETURN_IF_ERROR(CheckSigmas(options.sigma_rels));
  ASSIGN_OR_RETURN(std::vector<EmaSnapshotInfo> all, ListEmaSnapshots(root));
  std::vector<EmaSnapshotInfo> snaps;
  std::string steps;
  for (EmaSnapshotInfo& s : all) {
    steps += (steps.empty() ? "" : ", ") + std::to_string(s.step);
    if (!options.step_max || s.step <= *options.step_max) snaps.push_back(std::move(s));
  }
  if (snaps.empty()) {
    return NotFound("post-hoc EMA: no snapshot at or before step ", *options.step_max,
                    " (snapshot steps: ", steps, ")");
  }
  PosthocPlan plan;
  plan.step = snaps.back().step;
  plan.target_dir = snaps.back().dir;
  std::map<int64_t, std::string> starts;
  for (const EmaSnapshotInfo& s : snaps) {
    for (const EmaSnapshotSlot& slot : s.slots) {
      plan.inputs.push_back(
          PosthocInput{s.step, s.dir, slot.name, slot.gamma, slot.sigma_rel, slot.t});
      starts.emplace(slot.start_step, slot.name + " (step " + std::to_string(s.step) + ")");
    }
  }
  if (plan.inputs.empty())
    return NotFound("post-hoc EMA: the snapshots up to step ", plan.step, " hold no slot");
  std::map<std::vector<std::string>, std::string> subsets;  // tracked set -> one slot with it
  for (const EmaSnapshotInfo& s : snaps) {
    for (const EmaSnapshotSlot& slot : s.slots) {
      subsets.emplace(slot.params,
                      slot.name + " (step " + std::to_string(s.step) + ", " +
                          (slot.params.empty() ? std::string("every parameter")
                                               : std::to_string(slot.params.size()) + " tracked") +
                          ")");
    }
  }
  if (subsets.size() > 1) {
    std::string list;
    for (const auto& [params, who] : subsets) list += (list.empty() ? "" : ", ") + who;
    return InvalidArgument("post-hoc EMA: the snapshotted slots track different parameters (", list,
                           "); combine only slots with the same include/exclude patterns");
  }
  plan.tracked = subsets.begin()->first;
  if (starts.size() > 1) {
    std::string list;
    for (const auto& [st, who] : starts)
      list += (list.empty() ? "" : ", ") + std::to_string(st) + " for " + who;
    return InvalidArgument("post-hoc EMA: the snapshotted slots have different start steps (", list,
                           "); the power-function profiles must share one origin");
  }
  plan.start_step = starts.begin()->first;
  plan.t = plan.step - plan.start_step;
  std::vector<PowerProfile> in, out;
  for (const PosthocInput& i : plan.inputs) in.push_back(PowerProfile{double(i.t), i.gamma});
  for (double s : options.sigma_rels) {
    ASSIGN_OR_RETURN(double g, SigmaRelToGamma(s));
    out.push_back(PowerProfile{double(plan.t), g});
    plan.targets.push_back(
        PosthocTarget{s, g, OutputPath(out_path, s, options.sigma_rels.size()), {}, 0});
  }
  ASSIGN_OR_RETURN(PosthocSolution sol, SolvePosthocCoefficients(in, out));
  for (size_t j = 0; j < plan.targets.size(); ++j) {
    plan.targets[j].coefficients = sol.coefficients[j];
    plan.targets[j].fit_error = sol.relative_fit_error[j];
  }
  return plan;
}

std::string FormatPosthocPlan(const PosthocPlan& plan) {
  std::ostringstream o;
  o << "post-hoc EMA at step " << plan.step << " (t = " << plan.t << " steps since start step "
    << plan.start_step << "), " << plan.inputs.size() << " input profiles\n";
  for (const PosthocTarget& tg : plan.targets) {
    o << "sigma_rel " << Printf("%g", tg.sigma_rel) << " (gamma " << Printf("%.4f", tg.gamma)
      << "): profile fit error " << Printf("%.3e", tg.fit_error) << " -> " << tg.out_path << "\n";
    o << "  step        slot                  sigma_rel  gamma      t          coefficient\n";
    for (size_t i = 0; i < plan.inputs.size(); ++i) {
      const PosthocInput& in = plan.inputs[i];
      char line[256];
      std::snprintf(line, sizeof(line), "  %-11lld %-21s %-10.4f %-10.4f %-10lld % .10e\n",
                    (long long)in.step, in.slot.c_str(), in.sigma_rel, in.gamma, (long long)in.t,
                    tg.coefficients[i]);
      o << line;
    }
  }
  return o.str();
}

StatusOr<std::vector<ExportReport>> WritePosthoc(const PosthocPlan& plan,
                                                 const PosthocOptions& options,
                                                 Communicator* comm) {
  std::vector<ExportReport> reports;
  ExportOptions eo;
  eo.max_file_size = options.max_file_size;
  eo.piece_bytes = options.piece_bytes;
  eo.include_buffers = options.include_buffers;
  eo.fsync = options.fsync;
  for (const PosthocTarget& target : plan.targets) {
    StatusOr<Readers> readers = OpenReaders(plan, target);
    StatusOr<ExportPlan> files = InvalidArgument("unset");
    Status local = readers.status();
    if (local.ok()) {
      const Manifest& m = readers->by_dir.at(plan.target_dir)->manifest();
      std::vector<std::string> untracked;
      for (const std::string& p : LayoutParamNames(m.layout)) {
        if (!plan.tracked.empty() &&
            std::find(plan.tracked.begin(), plan.tracked.end(), p) == plan.tracked.end()) {
          untracked.push_back(p);
        }
      }
      files = PlanExport(m, "posthoc", options.dtype, target.out_path,
                         Metadata(plan, target, untracked), eo);
      local = files.status();
    }
    RETURN_IF_ERROR(comm == nullptr
                        ? local
                        : AgreeOnStatus(comm, local, "post-hoc EMA: opening the snapshots"));
    Combiner combine(plan, target, *readers);
    ExportValueFn values = [&combine](const ExportTensor& t, int64_t b, int64_t n, void* dst,
                                      DType* type) { return combine(t, b, n, dst, type); };
    StatusOr<ExportReport> r = WriteExportPlan(*files, values, comm, eo);
    if (!r.ok())
      return r.status().WithContext("post-hoc EMA sigma_rel " + Printf("%g", target.sigma_rel));
    reports.push_back(std::move(*r));
  }
  return reports;
}

StatusOr<PosthocPlan> ReconstructPosthocEma(const std::string& root, const std::string& out_path,
                                            const PosthocOptions& options, Communicator* comm,
                                            std::vector<ExportReport>* reports) {
  StatusOr<PosthocPlan> plan = PlanPosthoc(root, out_path, options);
  if (comm != nullptr) RETURN_IF_ERROR(AgreeOnStatus(comm, plan.status(), "post-hoc EMA plan"));
  RETURN_IF_ERROR(plan.status());
  ASSIGN_OR_RETURN(std::vector<ExportReport> written, WritePosthoc(*plan, options, comm));
  if (reports != nullptr) *reports = std::move(written);
  return plan;
}

}  // namespace shardema
