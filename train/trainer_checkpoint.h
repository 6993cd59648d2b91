// The trainer's checkpoints: what the meta holds, saving (sync or async, with --keep), and
// --resume (fresh start without a checkpoint, hyperparameter check, reshard on another world
// size, bit-exact restore on the same one).
//
// Meta: TrainState::Meta's sections ("store", "optimizer", "ema") plus "trainer" ({"config":
// TrainConfig::HparamsJson() + TrainModel::Hparams() + "data_rows", compared on resume;
// "progress": world size, data position, RNG seed; "run": the whole command line, not compared}),
// TrainModel::MetaSections() (e.g. "tied_weights" for exports) and this run's lineage. The
// trainer draws random numbers only while initialising, so the seed is the whole RNG state.
//
// Resume (collective): rank 0 looks at --ckpt-dir and broadcasts what it found. No directory, or
// none with `latest` or a committed step: a fresh start. Otherwise ResolveResumeCheckpoint picks
// the checkpoint (--resume-step S; else the newest committed step, unless a step newer than
// `latest`'s does not continue its lineage: refused, naming them), and --discard-newer-steps then
// deletes the committed steps after it. Any failure (a corrupt or missing file, a checksum
// mismatch, another model) is an error naming the file, never a silent fresh start or an older
// checkpoint. Every section's "config" is compared with this run's before slots are read
// (checkpoint/hparams.h): differences fail, listing each one, unless --override-hparams (this
// run's values win; new EMA slots start afresh, slots only in the checkpoint are dropped).
// Continuing from an EMA: --init CKPT --init-from-slot NAME (a fresh run from slot NAME,
// InitFromCheckpointSlot) or --resume --reset-master-from-slot NAME (master := slot NAME after
// the restore, all else kept; checked before anything is read or deleted).
// Meta layout, resume rules and the EMA continuations in detail: train/CHECKPOINTS.md.
//
// A fresh run (no --resume) refuses a --ckpt-dir that already holds checkpoints.
// Threading: one thread (the trainer's). Errors agree across ranks where noted.
#ifndef SHARDEMA_TRAIN_TRAINER_CHECKPOINT_H_
#define SHARDEMA_TRAIN_TRAINER_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/lineage.h"
#include "checkpoint/root_lock.h"
#include "checkpoint/writer.h"
#include "framework/communicator.h"
#include "framework/status.h"
#include "fsdp/store.h"
#include "train/model.h"
#include "train/train_config.h"
#include "train/train_state.h"

namespace shardema {

// The trainer's own meta section ("trainer", see above) of a checkpoint written after `step`
// completed optimizer steps, as TrainState::Meta's `extra`.
nlohmann::json TrainerSections(const TrainConfig& config, const TrainModel& model,
                               const TrainData& data, int world_size, int64_t step);

// Local (each rank reads only its own shard's ranges, at any world size of the checkpoint's).
// The master := EMA slot `slot` of the checkpoint at `path` (a step directory, or a root: its
// newest committed step, checkpoint/reader.h), as f32 values (checkpoint/slot_values.h: a bf16
// slot widened exactly, a delta slot params + d); the store's buffers := the slot's copies;
// refreshes the compute copy. Logs the source on rank 0.
// Errors (the flag and the checkpoint named): kInvalidArgument when `path` is not a directory, the
// checkpoint's model differs (listing each difference), the checkpoint has no EMA slot `slot`
// (listing its EMA slots) or the slot never started; the reader's kNotFound / kDataLoss. The
// master is unchanged on error.
Status InitFromCheckpointSlot(ShardedParameterStore* store, const std::string& path,
                              const std::string& slot);

struct ResumeInfo {
  bool resumed = false;
  int64_t step = 0;  // completed steps restored (0 for a fresh start)
  std::string dir;   // the checkpoint loaded
  int saved_world_size = 0;
  bool resharded = false;
  std::vector<std::string> overridden;  // differences accepted with --override-hparams
  std::optional<Lineage> lineage;       // the loaded checkpoint's (none before format version 2)
  std::string master_from_slot;         // --reset-master-from-slot: the slot copied to the master
};

// Collective. This run's lineage (checkpoint/lineage.h): a new run id (rank 0's, broadcast) after
// the resumed checkpoint's runs, or alone for a fresh start.
StatusOr<Lineage> RunLineage(const ResumeInfo& resume, Communicator* comm);

// Collective. Restores the training state (master, moments, EMA slots and counters) from the latest
// checkpoint in config.ckpt_dir (see above), or reports a fresh start; with
// --reset-master-from-slot then copies that slot into the master (kInvalidArgument when there is
// no checkpoint to resume).
StatusOr<ResumeInfo> ResumeFromLatest(const TrainConfig& config, const TrainModel& model,
                                      const TrainData& data, Communicator* comm, TrainState* state);

// Collective. Rank 0 takes --ckpt-dir's RootLock (creating the directory) for as long as the
// returned object lives (null on other ranks). Errors (agreed by all ranks): kInvalidArgument
// when --ckpt-dir names a file; kFailedPrecondition naming the holder's host and pid when
// another job holds it.
StatusOr<std::unique_ptr<RootLock>> LockCheckpointDir(const TrainConfig& config,
                                                      Communicator* comm);

// Collective. For a run without --resume: kAlreadyExists when config.ckpt_dir holds a committed
// checkpoint or a `latest` file; creates the directory otherwise.
Status PrepareFreshCheckpointDir(const TrainConfig& config, Communicator* comm);

// Saves at the --save-every cadence and at the end; synchronous or asynchronous (--async-save:
// the snapshot is taken at once, files are written in the background and committed by Poll()
// during later steps or by Finish()).
class CheckpointSaver {
 public:
  // `config`, `model` and `data` must outlive the saver.
  // `lineage`: this run's (RunLineage), written into every checkpoint's meta.
  // `replicas` (hybrid sharding): `comm` holds that many copies of the state's ranks, which split
  // the writing (SaveOptions::replicas).
  CheckpointSaver(const TrainConfig& config, const TrainModel& model, const TrainData& data,
                  Communicator* comm, Lineage lineage, int replicas = 1);

  // Local. With --async-save, reserves and touches the writer's staging memory for the state
  // now (CheckpointWriter::ReserveStaging): the first save then stalls no step, and a rank short
  // of memory fails at setup rather than at its first save. Nothing without --async-save.
  Status ReserveStaging(const TrainState& state);
  // Collective. Writes the checkpoint of `step` (async or not per the config).
  Status Save(const TrainState& state, int64_t step);
  // Collective. The run's last checkpoint: synchronous even with --async-save (nothing is left
  // to overlap it with, so a snapshot would only add a copy); commits a pending save first.
  Status SaveFinal(const TrainState& state, int64_t step);
  // Local. Blocks until a pending asynchronous save no longer reads the training state; call it
  // before anything changes the persistent slots (the optimizer step). Cheap when none is pending.
  void WaitSnapshot();
  // Collective. Commits a finished background save; cheap otherwise.
  Status Poll();
  // Collective. Waits for and commits a pending save.
  Status Finish();
  // Step of the last committed checkpoint of this run (-1 when none), and its directory.
  int64_t last_committed_step() const { return writer_.last_committed_step(); }
  const std::string& last_committed_dir() const { return writer_.last_committed_dir(); }
  uint64_t bytes_written() const { return writer_.bytes_written(); }

 private:
  // The checkpoint view of `state` at `step` with the trainer's sections.
  StatusOr<CheckpointState> View(const TrainState& state, int64_t step) const;
  const TrainConfig& config_;
  const TrainModel& model_;
  const TrainData& data_;
  Communicator* comm_;
  Lineage lineage_;
  int replicas_;
  CheckpointWriter writer_;
};

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_TRAINER_CHECKPOINT_H_
