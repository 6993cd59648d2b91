#include "ema/snapshot.h"

#include <climits>
#include <set>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/directory.h"
#include "checkpoint/format.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/state.h"
#include "checkpoint/writer.h"
#include "ema/schedule.h"
#include "framework/logging.h"
#include "fsdp/param_subset.h"

namespace shardema {

using nlohmann::json;

namespace {

constexpr char kSnapshotDir[] = "ema_snapshots";
constexpr char kMetaKey[] = "ema_snapshot";

// The slot's profile when it is eligible for a snapshot (see snapshot.h).
bool Eligible(const EmaSlots& emas, size_t i, EmaSnapshotSlot* out) {
  const EmaConfig& c = emas.config(i);
  const EmaCounters& k = emas.counters(i);
  if (c.kind != EmaScheduleKind::kPowerFunction || !k.started()) return false;
  const int64_t t = k.last_update_step - c.start_step;
  if (k.num_updates < 1 || t < 1) return false;
  *out = EmaSnapshotSlot{c.name, c.gamma, GammaToSigmaRel(c.gamma), c.start_step, t};
  return true;
}

json SlotJson(const EmaSnapshotSlot& s) {
  return {{"name", s.name},
          {"gamma", s.gamma},
          {"sigma_rel", s.sigma_rel},
          {"start_step", s.start_step},
          {"t", s.t}};
}

StatusOr<EmaSnapshotInfo> InfoFromManifest(const Manifest& m, const std::string& dir) {
  EmaSnapshotInfo info;
  info.step = m.step;
  info.dir = dir;
  info.world_size = m.world_size;
  const std::string where = JoinPath(dir, "manifest.json");
  if (!m.meta.is_object() || !m.meta.contains(kMetaKey) || !m.meta.at(kMetaKey).is_object()) {
    return DataLoss("'", where, "': no \"", kMetaKey, "\" section in meta: not an EMA snapshot");
  }
  const json& e = m.meta.at(kMetaKey);
  try {
    for (const json& s : e.at("slots")) {
      EmaSnapshotSlot slot{s.at("name").get<std::string>(), s.at("gamma").get<double>(),
                           s.at("sigma_rel").get<double>(), s.at("start_step").get<int64_t>(),
                           s.at("t").get<int64_t>()};
      if (m.FindSlot(slot.name) < 0) {
        return DataLoss("'", where, "': ", kMetaKey, " lists slot '", slot.name,
                        "' but the snapshot has no such slot");
      }
      slot.params = m.slots[size_t(m.FindSlot(slot.name))].params;
      if (!(slot.gamma > 0) || slot.t < 1) {
        return DataLoss("'", where, "': slot '", slot.name, "' has gamma ", slot.gamma, " and t ",
                        slot.t, " (expected gamma > 0, t >= 1)");
      }
      info.slots.push_back(std::move(slot));
    }
  } catch (const json::exception& ex) {
    return DataLoss("'", where, "': malformed \"", kMetaKey, "\" section: ", ex.what());
  }
  return info;
}

void WriteIndex(const std::string& snap_root, bool fsync) {
  StatusOr<std::vector<EmaSnapshotInfo>> list = ListEmaSnapshots(snap_root);
  Status s = list.status();
  if (s.ok()) {
    json arr = json::array();
    for (const EmaSnapshotInfo& i : *list) arr.push_back(i.ToJson());
    s = WriteFileAtomic(JoinPath(snap_root, "index.json"), json{{"snapshots", arr}}.dump(1) + "\n",
                        fsync);
  }
  if (!s.ok())
    LOG_WARNING << "EMA snapshot index not updated (snapshots are unaffected): " << s.ToString();
}

}  // namespace

std::string EmaSnapshotRoot(const std::string& ckpt_root) {
  return JoinPath(ckpt_root, kSnapshotDir);
}

bool EmaSnapshotDue(int64_t step, int64_t every) {
  return every > 0 && step > 0 && step % every == 0;
}

json EmaSnapshotInfo::ToJson() const {
  json s = json::array();
  for (const EmaSnapshotSlot& x : slots) s.push_back(SlotJson(x));
  return {{"step", step}, {"dir", BaseName(dir)}, {"world_size", world_size}, {"slots", s}};
}

StatusOr<std::string> WriteEmaSnapshot(const std::string& ckpt_root, Communicator* comm,
                                       const EmaSlots& emas, int64_t step,
                                       const EmaSnapshotOptions& options) {
  if (emas.swapped()) {
    return FailedPrecondition("EMA snapshot of step ", step, ": slot '", emas.swapped_slot(),
                              "' is swapped in; swap it back first");
  }
  const std::string snap_root = EmaSnapshotRoot(ckpt_root);
  if (PathExists(JoinPath(JoinPath(snap_root, StepDirName(step)), "manifest.json")))
    return std::string();
  const ShardedParameterStore* store = emas.store();
  CheckpointState state;
  state.step = step;
  state.rank = store->rank();
  state.layout = store->layout();
  std::vector<std::vector<float>> shards;
  json slots = json::array(), configs = json::array();
  for (size_t i = 0; i < emas.size(); ++i) {
    EmaSnapshotSlot slot;
    if (!Eligible(emas, i, &slot)) continue;
    ASSIGN_OR_RETURN(std::vector<float> shard, emas.ShardToHost(i));
    shards.push_back(std::move(shard));
    const EmaCounters& k = emas.counters(i);
    json sj = SlotJson(slot);
    sj["last_update_step"] = k.last_update_step;
    sj["num_updates"] = k.num_updates;
    sj["interval"] = emas.config(i).interval;
    slots.push_back(sj);
    json cj = emas.config(i).ToJson();
    cj.erase("storage");  // a snapshot holds the reconstructed fp32 values of any storage
    cj.erase("sr_seed");
    configs.push_back(std::move(cj));
  }
  if (shards.empty()) return std::string();
  // Subset slots keep only their tracked elements; the live master of the parameters some
  // snapshotted slot does not track is kept as "params" (a subset slot itself), so the snapshot
  // stands for whole models (ckpt export, ckpt posthoc).
  std::set<std::string> untracked;
  for (size_t i = 0, j = 0; i < emas.size(); ++i) {
    EmaSnapshotSlot slot;
    if (!Eligible(emas, i, &slot)) continue;
    std::vector<float>& shard = shards[j++];
    const ParamSubset* sub = emas.subset(i);
    if (sub == nullptr) {
      state.slots.push_back(SlotView{slot.name, DType::kF32, shard.data()});
      continue;
    }
    std::vector<float> compact(size_t(sub->numel()));
    sub->Compact(shard.data(), compact.data(), sizeof(float));
    shard = std::move(compact);
    state.slots.push_back(SlotView{slot.name, DType::kF32, shard.data(), sub->params()});
    const std::set<std::string> in(sub->params().begin(), sub->params().end());
    for (const std::string& p : LayoutParamNames(store->layout())) {
      if (in.count(p) == 0) untracked.insert(p);
    }
  }
  if (!untracked.empty()) {
    std::vector<std::string> names;  // layout order
    for (const std::string& p : LayoutParamNames(store->layout())) {
      if (untracked.count(p) != 0) names.push_back(p);
    }
    ASSIGN_OR_RETURN(ParamSubset live, ParamSubset::Create(store->layout(), store->rank(), names));
    ASSIGN_OR_RETURN(std::vector<float> master,
                     store->LocalToHost(store->master(), store->device()));
    std::vector<float> compact(size_t(live.numel()));
    live.Compact(master.data(), compact.data(), sizeof(float));
    shards.push_back(std::move(compact));
    state.slots.push_back(SlotView{"params", DType::kF32, shards.back().data(), live.params()});
  }
  for (const ParamSpec& b : store->buffer_specs()) {
    ASSIGN_OR_RETURN(TensorView v, store->buffer(b.name));
    state.buffers.push_back(BufferView{b.name, v.shape, v.dtype, v.data});
  }
  state.meta = {{"ema", configs},
                {kMetaKey, {{"format_version", 1}, {"step", step}, {"slots", slots}}}};
  SaveOptions so;
  so.keep_last = INT_MAX;
  so.fsync = options.fsync;
  so.replicas = options.replicas;
  CheckpointWriter writer(snap_root, comm, so);
  Status s = writer.Save(state);
  if (!s.ok()) return s.WithContext("EMA snapshot of step " + std::to_string(step));
  if (RankOf(comm) == 0) WriteIndex(snap_root, options.fsync);
  return writer.last_committed_dir();
}

StatusOr<std::vector<EmaSnapshotInfo>> ListEmaSnapshots(const std::string& path) {
  std::string root = path;
  if (IsDirectory(JoinPath(path, kSnapshotDir))) {
    root = JoinPath(path, kSnapshotDir);
  } else if (BaseName(path) != kSnapshotDir || !IsDirectory(path)) {
    return NotFound(
        "no EMA snapshots: '", JoinPath(path, kSnapshotDir),
        "' does not exist (train with power-function EMA slots and --ema-snapshot-every K)");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommittedSteps(root));
  if (steps.empty()) {
    return NotFound("no EMA snapshots in '", root,
                    "' (expected committed step_N directories written by "
                    "--ema-snapshot-every)");
  }
  std::vector<EmaSnapshotInfo> out;
  for (int64_t step : steps) {
    const std::string dir = JoinPath(root, StepDirName(step));
    ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
    ASSIGN_OR_RETURN(EmaSnapshotInfo info, InfoFromManifest(m, dir));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace shardema
