#include "train/trainer_checkpoint.h"

#include <cstring>
#include <set>

#include "checkpoint/collective_bytes.h"
#include "checkpoint/directory.h"
#include "checkpoint/hparams.h"
#include "checkpoint/load.h"
#include "checkpoint/meta_schema.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/reader.h"
#include "checkpoint/root_lock.h"
#include "checkpoint/slot_values.h"
#include "ema/snapshot.h"
#include "framework/logging.h"
#include "fsdp/slot_names.h"

namespace shardema {
namespace {

// What rank 0 finds in --ckpt-dir: nothing of a run, committed checkpoints, or only EMA
// snapshots (ema/snapshot.h) of an earlier run that left no checkpoint.
enum class DirState : int { kEmpty = 0, kHasCheckpoints = 1, kOnlySnapshots = 2 };

StatusOr<DirState> InspectRoot(const std::string& root) {
  if (!PathExists(root)) return DirState::kEmpty;
  if (!IsDirectory(root)) return InvalidArgument("--ckpt-dir '", root, "' is not a directory");
  if (PathExists(JoinPath(root, kLatestName))) return DirState::kHasCheckpoints;
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommittedSteps(root));
  if (!steps.empty()) return DirState::kHasCheckpoints;
  return PathExists(EmaSnapshotRoot(root)) ? DirState::kOnlySnapshots : DirState::kEmpty;
}

// Rank 0 inspects the root; every rank gets its answer (or its error).
StatusOr<DirState> AgreeOnRoot(const std::string& root, Communicator* comm) {
  StatusOr<DirState> local = DirState::kEmpty;
  if (RankOf(comm) == 0) local = InspectRoot(root);
  const std::string mine = local.ok() ? std::to_string(int(*local)) : std::string();
  RETURN_IF_ERROR(AgreeOnStatus(comm, local.status(), "--ckpt-dir '" + root + "'"));
  ASSIGN_OR_RETURN(std::string got, BroadcastBytes(comm, mine, 0));
  if (got == "1") return DirState::kHasCheckpoints;
  return got == "2" ? DirState::kOnlySnapshots : DirState::kEmpty;
}

// A run starting afresh would add its snapshots beside those of another run (and `ckpt posthoc`
// would combine both).
Status SnapshotsOfAnotherRun(const std::string& root) {
  return AlreadyExists(
      "--ckpt-dir '", root, "' holds EMA snapshots of an earlier run in '", EmaSnapshotRoot(root),
      "' but no checkpoint to continue it from: a fresh run would mix its "
      "snapshots with those; use another --ckpt-dir or remove '",
      EmaSnapshotRoot(root), "' (--resume continues a run only from a checkpoint)");
}

// OK when the checkpoint (manifest `m` of directory `dir`) has EMA slot `slot` and it started;
// else kInvalidArgument for `flag`, naming the checkpoint and listing its EMA slots.
Status CheckEmaSlotOf(const Manifest& m, const std::string& dir, const std::string& slot,
                      const std::string& flag) {
  const std::string where = "checkpoint '" + dir + "' (step " + std::to_string(m.step) + ")";
  std::vector<EmaSlotProgress> slots;
  const JsonField meta(m.meta, "manifest '" + dir + "/manifest.json'", "meta");
  if (meta.Has(kEmaMetaSection)) {
    ASSIGN_OR_RETURN(const JsonField progress, ProgressOf(meta, kEmaMetaSection));
    ASSIGN_OR_RETURN(slots, ParseEmaProgress(progress));
  }
  std::string names;
  for (const EmaSlotProgress& p : slots) {
    if (p.name == slot && m.FindSlot(slot) >= 0) {
      if (p.started_at >= 0) return Status::Ok();
      return InvalidArgument(flag, ": EMA slot '", slot, "' of ", where,
                             " never started (started_at ", p.started_at, ", num_updates ",
                             p.num_updates,
                             "): it holds no weights; pick a slot that started, or a checkpoint "
                             "after its start step");
    }
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return InvalidArgument(flag, ": ", where, " has no EMA slot '", slot,
                         "' (its EMA slots: ", names.empty() ? "none" : names, ")");
}

}  // namespace

Status InitFromCheckpointSlot(ShardedParameterStore* store, const std::string& path,
                              const std::string& slot) {
  const std::string flag = "--init-from-slot " + slot;
  if (!IsDirectory(path)) {
    return InvalidArgument(flag, ": --init '", path,
                           "' is not a checkpoint (a step directory or a checkpoint root); a "
                           "safetensors file is given to --init without --init-from-slot");
  }
  StatusOr<std::unique_ptr<CheckpointReader>> opened = CheckpointReader::Open(path);
  if (!opened.ok()) return opened.status().WithContext(flag);
  CheckpointReader& reader = **opened;
  const Manifest& m = reader.manifest();
  const StoreLayout& layout = store->layout();
  const std::vector<std::string> diffs = LayoutDifferences(m.layout, layout);
  if (!diffs.empty()) {
    std::string msg = flag + ": the model of checkpoint '" + reader.dir() + "' differs from this " +
                      "run's (" + std::to_string(diffs.size()) + "):";
    for (const std::string& d : diffs) msg += "\n  " + d;
    return InvalidArgument(msg);
  }
  // "params": the checkpoint's live master (a new run from its weights, e.g. to unfreeze).
  const bool master = slot == kMasterSlot;
  if (!master) RETURN_IF_ERROR(CheckEmaSlotOf(m, reader.dir(), slot, flag));
  const int index = m.FindSlot(slot);
  if (index < 0)
    return DataLoss(flag, ": checkpoint '", reader.dir(), "' has no slot '", slot, "'");
  EmaStorage storage = EmaStorage::kF32;
  if (!master) {
    ASSIGN_OR_RETURN(storage, SlotStorage(reader, slot));
  }
  // This rank's elements of every unit, read from the rank files that hold them.
  std::vector<float> shard(size_t(layout.local_numel()));
  const int rank = store->rank();
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const int64_t ns = layout.units()[u].shard_numel;
    RETURN_IF_ERROR(ReadUnitRangeF32(reader, index, storage, u, rank * ns, (rank + 1) * ns,
                                     shard.data() + layout.local_offset(u))
                        .WithContext(flag));
  }
  // The slot's buffer copies, read (and checked) before anything changes.
  SlotRegistry& reg = store->registry();
  std::vector<std::pair<int, TensorView>> buffers;
  for (const ParamSpec& b : store->buffer_specs()) {
    const std::string name = master ? b.name : SlotBufferName(slot, b.name);
    const int j = m.FindBuffer(name);
    ASSIGN_OR_RETURN(TensorView dst, reg.BufferTensor(b.name));
    if (j < 0 || m.buffers[size_t(j)].shape != b.shape || m.buffers[size_t(j)].dtype != dst.dtype) {
      return DataLoss(flag, ": checkpoint '", reader.dir(), "' lacks buffer '", name, "' ",
                      DTypeName(dst.dtype), ShapeToString(b.shape));
    }
    buffers.emplace_back(j, dst);
  }
  std::vector<std::vector<char>> values;
  for (const auto& [j, dst] : buffers) {
    values.emplace_back(dst.nbytes());
    RETURN_IF_ERROR(reader.ReadBuffer(j, values.back().data()).WithContext(flag));
  }
  RETURN_IF_ERROR(store->InitFromLocal(shard.data()));
  for (size_t k = 0; k < buffers.size(); ++k) {
    std::memcpy(buffers[k].second.data, values[k].data(), values[k].size());
  }
  if (rank == 0) {
    LOG_INFO << flag << ": master weights from " << (master ? "slot '" : "EMA slot '") << slot
             << "' (" << EmaStorageName(storage) << ") of checkpoint '" << reader.dir()
             << "' (step " << m.step << ", saved on " << m.world_size << " rank(s))";
  }
  return Status::Ok();
}

nlohmann::json TrainerSections(const TrainConfig& config, const TrainModel& model,
                               const TrainData& data, int world_size, int64_t step) {
  nlohmann::json hparams = config.HparamsJson();
  hparams.update(model.Hparams());
  hparams["data_rows"] = data.size();
  nlohmann::json position = {{"next_step", step}, {"rows", data.size()}, {"source", data.source()}};
  position.update(data.Progress(step, config.batch));
  nlohmann::json progress = {
      {"world_size", world_size},
      {"data", position},
      {"rng",
       {{"seed", config.seed},
        {"generator", "splitmix64(seed ^ fnv1a(name)) per parameter / data tensor"},
        {"draws_during_training", 0}}}};
  nlohmann::json run = config.ToJson();
  run.update(model.Config());
  nlohmann::json meta = {{"trainer", {{"config", hparams}, {"progress", progress}, {"run", run}}}};
  meta.update(model.MetaSections());
  return meta;
}

StatusOr<std::unique_ptr<RootLock>> LockCheckpointDir(const TrainConfig& config,
                                                      Communicator* comm) {
  StatusOr<std::unique_ptr<RootLock>> lock = std::unique_ptr<RootLock>();
  if (RankOf(comm) == 0) {
    // A file where the root should be is the user's mistake (exit 2), not a lock failure.
    lock = PathExists(config.ckpt_dir) && !IsDirectory(config.ckpt_dir)
               ? StatusOr<std::unique_ptr<RootLock>>(InvalidArgument(
                     "--ckpt-dir '", config.ckpt_dir, "' is not a directory (a file is there)"))
               : RootLock::Acquire(config.ckpt_dir);
  }
  RETURN_IF_ERROR(AgreeOnStatus(comm, lock.status(), "--ckpt-dir '" + config.ckpt_dir + "' lock"));
  return lock;
}

Status PrepareFreshCheckpointDir(const TrainConfig& config, Communicator* comm) {
  ASSIGN_OR_RETURN(DirState state, AgreeOnRoot(config.ckpt_dir, comm));
  if (state == DirState::kHasCheckpoints) {
    return AlreadyExists("--ckpt-dir '", config.ckpt_dir,
                         "' already holds checkpoints: pass --resume to continue that run, or use "
                         "another directory");
  }
  if (state == DirState::kOnlySnapshots) return SnapshotsOfAnotherRun(config.ckpt_dir);
  Status made = RankOf(comm) == 0 ? MakeDirs(config.ckpt_dir) : Status::Ok();
  return AgreeOnStatus(comm, made, "create --ckpt-dir '" + config.ckpt_dir + "'");
}

StatusOr<ResumeInfo> ResumeFromLatest(const TrainConfig& config, const TrainModel& model,
                                      const TrainData& data, Communicator* comm,
                                      TrainState* state) {
  ResumeInfo info;
  const std::string& root = config.ckpt_dir;
  ASSIGN_OR_RETURN(DirState dir_state, AgreeOnRoot(root, comm));
  const std::optional<int64_t> step =
      config.resume_step >= 0 ? std::optional<int64_t>(config.resume_step) : std::nullopt;
  if (dir_state == DirState::kOnlySnapshots) return SnapshotsOfAnotherRun(root);
  if (dir_state == DirState::kEmpty && step) {
    return NotFound("--resume-step ", *step, ": --ckpt-dir '", root,
                    "' holds no committed checkpoint");
  }
  const std::string& reset = config.reset_master_from_slot;
  if (dir_state == DirState::kEmpty && !reset.empty()) {
    return InvalidArgument("--reset-master-from-slot ", reset, ": --ckpt-dir '", root,
                           "' holds no checkpoint to resume; to start a fresh run from an EMA "
                           "slot of another run use --init CKPT --init-from-slot ",
                           reset);
  }
  if (dir_state == DirState::kEmpty) {
    Status made = RankOf(comm) == 0 ? MakeDirs(root) : Status::Ok();
    RETURN_IF_ERROR(AgreeOnStatus(comm, made, "create --ckpt-dir '" + root + "'"));
    return info;  // fresh start
  }
  // The manifest first (every rank reads it: it is small and verified against its checksum), so
  // differing hyperparameters are reported before any slot is read.
  // `latest` is a hint (directory.h): the newest committed step, refusing to pick one when steps
  // newer than `latest`'s exist, unless --resume-step names it.
  std::string dir;
  StatusOr<Manifest> manifest = [&]() -> StatusOr<Manifest> {
    ASSIGN_OR_RETURN(dir, ResolveResumeCheckpoint(root, step));
    return ReadManifest(dir);
  }();
  RETURN_IF_ERROR(AgreeOnStatus(comm, manifest.status(), "--resume from '" + root + "'"));
  const nlohmann::json extra =
      TrainerSections(config, model, data, WorldSizeOf(comm), state->step());
  ASSIGN_OR_RETURN(nlohmann::json run_meta, state->Meta(extra));
  HparamCheckOptions check;
  check.allow_override = true;  // collect the lines; decided below
  ASSIGN_OR_RETURN(std::vector<std::string> diffs,
                   CheckHyperparameters(manifest->meta, run_meta, check));
  if (!diffs.empty() && !config.override_hparams) {
    std::string msg = "--resume from '" + root + "' (step " + std::to_string(manifest->step) +
                      "): the checkpoint's configuration differs from this run's (" +
                      std::to_string(diffs.size()) + "):";
    for (const std::string& d : diffs) msg += "\n  " + d;
    msg += "\npass --override-hparams to resume with this run's values";
    for (const std::string& d : diffs) {
      if (d.find("total_steps") == std::string::npos) continue;
      msg +=
          " (a cosine LR schedule decays over --steps: to extend the run, --override-hparams "
          "continues from the restored step on the cosine of the new --steps, whose LR at "
          "that step is higher than the old schedule's)";
      break;
    }
    return FailedPrecondition(msg);
  }
  for (const std::string& d : diffs)
    LOG_WARNING << "--override-hparams: keeping this run's value: " << d;
  info.overridden = diffs;
  if (!reset.empty()) {  // every rank read the same manifest: the same answer, nothing read yet
    RETURN_IF_ERROR(CheckEmaSlotOf(*manifest, dir, reset, "--reset-master-from-slot " + reset));
  }

  ASSIGN_OR_RETURN(CheckpointState dest, state->CheckpointView(extra));
  if (config.override_hparams) {
    // Request only what the checkpoint has (EMA slots new to this run start afresh).
    std::vector<SlotView> present;
    for (const SlotView& v : dest.slots) {
      if (manifest->FindSlot(v.name) >= 0) present.push_back(v);
    }
    dest.slots = present;
  }
  LoadOptions lo;
  lo.hparams.allow_override = config.override_hparams;
  lo.unrequested = config.override_hparams ? UnrequestedPolicy::kIgnore : UnrequestedPolicy::kError;
  ASSIGN_OR_RETURN(LoadReport report, LoadCheckpoint(dir, comm, dest, lo));
  Status restored = state->FinishRestore(dest.meta, config.override_hparams);
  RETURN_IF_ERROR(AgreeOnStatus(comm, restored, "--resume from '" + report.dir + "'"));
  if (state->step() != report.step) {
    return DataLoss("checkpoint '", report.dir, "': manifest step ", report.step,
                    " but optimizer state step ", state->step());
  }
  if (!reset.empty()) {
    Status copied = state->emas() != nullptr ? state->emas()->ResetMasterFromSlot(reset)
                                             : InvalidArgument("this run has no EMA slots");
    RETURN_IF_ERROR(AgreeOnStatus(comm, copied, "--reset-master-from-slot " + reset));
    info.master_from_slot = reset;
    if (RankOf(comm) == 0) {
      LOG_INFO << "--reset-master-from-slot: the master weights are now EMA slot '" << reset
               << "' of '" << report.dir << "' (step " << report.step
               << "); the step, moments, LR schedule and EMA slots are kept";
    }
  }
  if (config.discard_newer_steps) {
    StatusOr<std::vector<int64_t>> gone = std::vector<int64_t>();
    if (RankOf(comm) == 0) gone = DiscardStepsAfter(root, report.step);
    RETURN_IF_ERROR(AgreeOnStatus(comm, gone.status(), "--discard-newer-steps in '" + root + "'"));
    if (RankOf(comm) == 0 && !gone->empty()) {
      LOG_WARNING << "--discard-newer-steps: deleted the committed checkpoints of steps "
                  << StepList(*gone) << " in '" << root << "'";
    }
  }
  StatusOr<std::optional<Lineage>> lineage = ParseLineage(manifest->meta, "'" + report.dir + "'");
  RETURN_IF_ERROR(AgreeOnStatus(comm, lineage.status(), "--resume from '" + report.dir + "'"));
  info.lineage = *lineage;
  info.resumed = true;
  info.step = report.step;
  info.dir = report.dir;
  info.saved_world_size = report.saved_world_size;
  info.resharded = report.resharded;
  return info;
}

StatusOr<Lineage> RunLineage(const ResumeInfo& resume, Communicator* comm) {
  std::string id = RankOf(comm) == 0 ? NewRunId() : std::string(16, '0');
  CollectiveOptions root0;
  RETURN_IF_ERROR(comm->Broadcast(&id[0], id.size(), DType::kU8, root0));
  return ChildLineage(resume.resumed ? resume.lineage : std::nullopt,
                      resume.resumed ? std::optional<int64_t>(resume.step) : std::nullopt, id,
                      resume.master_from_slot);
}

CheckpointSaver::CheckpointSaver(const TrainConfig& config, const TrainModel& model,
                                 const TrainData& data, Communicator* comm, Lineage lineage,
                                 int replicas)
    : config_(config),
      model_(model),
      data_(data),
      comm_(comm),
      lineage_(std::move(lineage)),
      replicas_(replicas),
      writer_(config.ckpt_dir, comm, [&config, replicas] {
        SaveOptions o;
        o.keep_last = config.keep;
        o.replicas = replicas;
        // --async-save: the snapshot copy itself runs on the writer thread, overlapping the next
        // step's forward/backward (--async-snapshot in-place: no copy, the writer writes from the
        // state); the trainer calls WaitSnapshot() before the optimizer step.
        o.snapshot = config.async_in_place ? SaveOptions::Snapshot::kInPlace
                                           : SaveOptions::Snapshot::kInBackground;
        return o;
      }()) {}

StatusOr<CheckpointState> CheckpointSaver::View(const TrainState& state, int64_t step) const {
  nlohmann::json extra =
      TrainerSections(config_, model_, data_, WorldSizeOf(comm_) / replicas_, step);
  extra[kLineageSection] = LineageJson(lineage_);
  return state.CheckpointView(extra);
}

Status CheckpointSaver::ReserveStaging(const TrainState& state) {
  if (!config_.async_save) return Status::Ok();
  ASSIGN_OR_RETURN(CheckpointState view, View(state, state.step()));
  return writer_.ReserveStaging(view);
}

Status CheckpointSaver::Save(const TrainState& state, int64_t step) {
  ASSIGN_OR_RETURN(CheckpointState view, View(state, step));
  if (config_.async_save) return writer_.SaveAsync(view);
  return writer_.Save(view);
}

Status CheckpointSaver::SaveFinal(const TrainState& state, int64_t step) {
  ASSIGN_OR_RETURN(CheckpointState view, View(state, step));
  return writer_.Save(view);
}

void CheckpointSaver::WaitSnapshot() { writer_.WaitSnapshot(); }

Status CheckpointSaver::Poll() {
  if (!writer_.pending()) return Status::Ok();
  return writer_.Poll().status();
}

Status CheckpointSaver::Finish() {
  if (!writer_.pending()) return Status::Ok();
  return writer_.Finish();
}

}  // namespace shardema
