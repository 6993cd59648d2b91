// EMA snapshots for post-hoc EMA (EDM2; ema/README.md "Snapshots"): every K steps each rank
// writes its shard of every power-function EMA slot as a snapshot, which ema/posthoc.h later
// combines into the EMA of any other sigma_rel.
//
// Where: a snapshot is an ordinary checkpoint (checkpoint/FORMAT.md: same rank files, checksums,
// manifest and commit protocol, written by CheckpointWriter) in the snapshot root
// ROOT/ema_snapshots (ROOT = the trainer's --ckpt-dir): ROOT/ema_snapshots/step_N/ (after step
// N), ROOT/ema_snapshots/latest (the writer's commit point) and ROOT/ema_snapshots/index.json
// (informational), so `ckpt inspect|verify|export ROOT/ema_snapshots/step_N` work on a snapshot.
// Snapshots are never rotated (keep_last is unlimited). Its slots are the snapshotted EMA slots
// under their own names (f32 values; a subset slot compact, with a "params" slot holding the live
// master of the untracked parameters); its buffers the store's replicated buffers at that step;
// its meta "ema" (each slot's EmaConfig::ToJson()) and "ema_snapshot" {"format_version": 1,
// "step", "slots": [{"name", "gamma", "sigma_rel", "start_step", "t", "last_update_step",
// "num_updates", "interval"}]}, t = last_update_step - start_step: the profile's time in steps.
//
// Which slots: every power-function slot (EmaScheduleKind::kPowerFunction) that has started and
// been updated at least once after its start (t >= 1); others are not snapshotted. With none, no
// snapshot is written (WriteEmaSnapshot returns "").
//
// Resume: a snapshot whose step is already committed (a resumed run replays that step bit-exactly)
// is kept and not rewritten; every rank sees the same directory, so every rank skips it without
// communication. Snapshots are read with the resharding reader, so snapshots of several world
// sizes mix. ListEmaSnapshots scans the committed step_N directories and reads their manifests
// (the source of truth); index.json is the same list, rewritten atomically by rank 0 after each
// snapshot for people and scripts; nothing reads it back, and failing to write it only logs.
#ifndef SHARDEMA_EMA_SNAPSHOT_H_
#define SHARDEMA_EMA_SNAPSHOT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ema/ema_slots.h"
#include "framework/communicator.h"
#include "framework/status.h"

namespace shardema {

// ROOT/ema_snapshots.
std::string EmaSnapshotRoot(const std::string& ckpt_root);

// True when the snapshot of step `step` is due with --ema-snapshot-every `every` (every > 0 and
// step a positive multiple of it).
bool EmaSnapshotDue(int64_t step, int64_t every);

struct EmaSnapshotOptions {
  bool fsync = true;  // off only in tests
  // Hybrid sharding: `comm` holds `replicas` copies of the store's ranks, which split the
  // writing (SaveOptions::replicas); the store's communicator is then one shard group.
  int replicas = 1;
};

// Collective over `comm` (null: one process): every rank calls it after the optimizer step that
// completed `step`, with the same step. Writes this rank's shard of every eligible slot (see
// above) through a CheckpointWriter (synchronous; its collectives are the only communication)
// and returns the committed directory, or "" when nothing was written (no eligible slot, or the
// snapshot of `step` already exists). The slots are read with EmaSlots::ShardToHost (device and
// offloaded slots included): extra host memory of one shard per eligible slot.
// Errors: the writer's (kResourceExhausted for ENOSPC naming the rank and file, ...), the same on
// every rank; kFailedPrecondition while a slot is swapped in.
StatusOr<std::string> WriteEmaSnapshot(const std::string& ckpt_root, Communicator* comm,
                                       const EmaSlots& emas, int64_t step,
                                       const EmaSnapshotOptions& options = {});

struct EmaSnapshotSlot {
  std::string name;
  double gamma = 0;
  double sigma_rel = 0;
  int64_t start_step = 0;
  int64_t t = 0;  // last_update_step - start_step, >= 1
  // The parameters the slot tracks (a subset slot: the manifest slot's "params"); empty: all.
  std::vector<std::string> params;
};

struct EmaSnapshotInfo {
  int64_t step = 0;
  std::string dir;  // the committed snapshot directory
  int world_size = 0;
  std::vector<EmaSnapshotSlot> slots;
  nlohmann::json ToJson() const;
};

// The committed snapshots of `path` (a checkpoint root holding ema_snapshots/, or the snapshot
// root itself, a directory named ema_snapshots), ascending by step. Reads each manifest (checked
// against manifest.xxh3). Errors: kNotFound when there is no snapshot root or no committed snapshot
// in it (naming the directory); kDataLoss naming the file for a corrupt manifest or a malformed
// "ema_snapshot" meta section.
StatusOr<std::vector<EmaSnapshotInfo>> ListEmaSnapshots(const std::string& path);

}  // namespace shardema

#endif  // SHARDEMA_EMA_SNAPSHOT_H_
