// CheckpointWriter: crash-safe sharded saves of a CheckpointState (checkpoint/state.h), synchronous
// or asynchronous, in the format and with the commit protocol of checkpoint/FORMAT.md.
//
// Every rank writes its rank file into ROOT/.tmp_step_N; once every rank's file is durable (an
// all-gather of the file reports), rank 0 writes the manifest, renames the directory to
// ROOT/step_N, updates ROOT/latest and drops checkpoints beyond keep_last (in the background). A
// crash at any point leaves the previous checkpoint and `latest` intact. All ranks make the same
// calls in the same order (`comm` null: one process); every collective runs on the calling thread.
//   Save(state)      [commit a pending save] + the save; returns once committed (or failed).
//   SaveAsync(state) [commit a pending save] + begin (one all-gather agreeing on the plan), then
//                    returns while a writer thread (file I/O only) copies the state to host
//                    staging (Snapshot::kInBackground) or writes straight from it (kInPlace).
//   WaitSnapshot()   local: blocks until the pending save no longer reads the caller's memory;
//                    call it before modifying any slot or buffer (e.g. the optimizer step).
//   Poll()           never blocks on a collective, a file write or rank 0's commit; returns true
//                    (or the save's error) at the same call on every rank, once the save is
//                    committed, or failed, on every rank (phase 1: files written, "commit start";
//                    phase 2: rank 0's commit done, "commit finish").
//   Wait()/Finish()  block until the save is committed; Finish() also waits for the deletions.
// last_committed_step()/dir() change at "commit finish", on every rank at the same call.
// Phases, agreements, snapshot modes and threads: checkpoint/ASYNC_SAVE.md.
//
// With SaveOptions::replicas R > 1 the R copies of each rank file's state write its parts.
// Errors, the same on every rank, are returned by the call that ends the save (Save, Poll, Wait,
// Finish, or the next SaveAsync, which then starts none): a validation error, a rank's write
// failure (e.g. kResourceExhausted for ENOSPC, naming the rank and file) or rank 0's commit
// failure; the temp directory is then removed and the previous checkpoint stays the latest.
// kAlreadyExists when step_N is committed (and `latest` names it, or !replace_committed);
// kInvalidArgument for a state that does not match the communicator or has null buffers.
// Memory: one host copy of the rank's part of its slots and buffers for kInBackground (reused),
// none for kInPlace; two io_bytes write buffers. Threading: one thread calls a writer; the state's
// memory must stay valid and unchanged during Save, and from SaveAsync until WaitSnapshot returns.
#ifndef SHARDEMA_CHECKPOINT_WRITER_H_
#define SHARDEMA_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/background_commit.h"
#include "checkpoint/background_deleter.h"
#include "checkpoint/directory.h"
#include "checkpoint/format.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/state.h"
#include "framework/communicator.h"
#include "framework/device.h"
#include "framework/status.h"

namespace shardema {

struct SaveOptions {
  int keep_last = 2;                          // committed checkpoints kept, >= 1
  uint64_t chunk_bytes = kDefaultChunkBytes;  // checksum chunk size recorded in the manifest
  uint64_t io_bytes = uint64_t(16) << 20;     // largest single write(2)
  bool fsync = true;                          // off only for tests that do not need durability
  WriteFaultHook fault_hook;                  // tests: simulate ENOSPC/EIO on any write
  // Where an asynchronous save's data comes from (see SaveAsync / WaitSnapshot above):
  // kInBackground stalls the steps least (bench/results/save_stall_bench_w2_*.json), kInPlace
  // needs no staging memory.
  enum class Snapshot : uint8_t {
    // The writer thread copies the state into staging memory, checksumming each block as it
    // copies it and queueing the writes as it goes (one pass over the state, never waiting for
    // the device); WaitSnapshot waits for the copy.
    kInBackground = 0,
    kInPlace = 1,  // no copy: the writer reads the caller's memory until WaitSnapshot
  };
  Snapshot snapshot = Snapshot::kInBackground;
  // A save may replace a committed step_N that `latest` does not name (CommitOptions).
  bool replace_committed = false;
  // Hybrid sharding (fsdp/HYBRID.md): the communicator's W ranks hold `replicas` (R) identical
  // copies of an S = W / R rank state; rank w passes state rank w % S and writes part w / S of
  // that rank file (PartRange: whole chunks, split evenly), so each byte is written once and each
  // rank writes about 1/W of them. With R > 1 the chunk size is lowered (never below 4096 bytes)
  // until the largest rank file has about 8R chunks, so that the parts balance. 1: every rank
  // writes its whole file.
  int replicas = 1;
  // Poll: every agree_every-th call of a phase (and its first) starts the ranks' non-blocking
  // agreement on "my part is done" (see Poll above); >= 1. Larger: fewer collectives, a later
  // commit (a caller that saves every K Polls with K <= agree_every gets one agreement per phase,
  // so the commit often completes only in the next SaveAsync).
  int agree_every = 4;
};

// The broadcast form of a CommitResult (background_commit.h) (JSON: status code and message, step,
// dir) and back. Decode errors (kInternal): not JSON, a missing or mistyped field, an OK result
// without a directory.
std::string EncodeCommitResult(const CommitResult& r);
StatusOr<CommitResult> DecodeCommitResult(const std::string& bytes);

class CheckpointWriter {
 public:
  CheckpointWriter(std::string root, Communicator* comm, SaveOptions options = {});
  // Joins a running background write and rank 0's commit. A save not committed by
  // Finish()/Wait()/Poll() is abandoned (a warning is logged; the next save removes its temp
  // directory); a commit rank 0 had started completes on disk, unreported.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  Status Save(const CheckpointState& state);
  Status SaveAsync(const CheckpointState& state);
  // Local: allocates the staging memory SaveAsync would need for `state` (or keeps a larger one)
  // and touches every page, so that the first asynchronous snapshot pays no page faults and a
  // process short of memory learns it now (kResourceExhausted, naming the bytes and rank), not
  // at its first save. kInvalidArgument for a state SaveAsync would refuse. Optional: without it
  // the first SaveAsync allocates the memory (untouched; its snapshot copy faults it in). With
  // Snapshot::kInPlace there is no staging memory: it only checks the state.
  Status ReserveStaging(const CheckpointState& state);
  StatusOr<bool> Poll();
  void WaitSnapshot();
  Status Wait();
  // Wait(), then waits for background deletions.
  Status Finish();

  // A save is begun and its outcome not yet returned (it may be writing or committing).
  bool pending() const { return pending_ != nullptr; }
  // Step and directory of the last checkpoint this writer committed (-1 / "" when none); updated
  // by the call that returns the commit's outcome (see "commit finish" above).
  int64_t last_committed_step() const { return last_commit_.step; }
  const std::string& last_committed_dir() const { return last_commit_.dir; }
  // Bytes of rank files this rank wrote in the saves this writer committed.
  uint64_t bytes_written() const { return bytes_written_; }
  const std::string& root() const { return root_; }

 private:
  struct Pending;
  StatusOr<std::unique_ptr<Pending>> Begin(const CheckpointState& state);
  // Phase 2 (see Poll above): start and finish the commit; Commit() does both, inline.
  Status StartCommit(bool background);
  Status FinishCommit();
  Status Commit();
  // Poll: every rank's part of the current phase is done.
  StatusOr<bool> NextPhase();
  // Completes Poll's all-reduce in flight (if any); on failure abandons the pending save.
  Status CompleteAgreement();
  CommitOptions CommitOpts();
  // PlanForState with the chunk size SaveOptions::replicas asks for.
  StatusOr<Manifest> Plan(const CheckpointState& state) const;
  // This rank's rank file and part of it (SaveOptions::replicas).
  int FileRank() const;
  std::pair<uint64_t, uint64_t> Part(const Manifest& plan) const;
  // Bytes of the snapshot of this rank's part of `plan`: the slots' bytes in it, then (rank 0's
  // file) the buffers', each page-aligned.
  uint64_t StagingBytes(const Manifest& plan) const;
  // Makes staging_ at least `bytes` (zero-filled when `touch`); false when allocation fails.
  bool GrowStaging(uint64_t bytes, bool touch);

  std::string root_;
  Communicator* comm_;
  SaveOptions options_;
  std::unique_ptr<Pending> pending_;
  // Asynchronous snapshot, reused; not zero-initialised (every byte used is copied first).
  // Host memory; a GPU store stages its device slots into host (pinned) memory before saving.
  // A framework Buffer of at least 64 KiB: page-aligned for direct I/O, and from 8 MiB on huge
  // pages (framework/device.h), which direct I/O pins 512 times fewer of.
  Buffer staging_;
  uint64_t staging_bytes_ = 0;
  std::vector<std::string> removals_;  // directories renamed for deletion (rank 0)
  std::unique_ptr<BackgroundDeleter> deleter_;
  bool first_prepare_ = true;
  CommitResult last_commit_;  // the last successful commit
  uint64_t bytes_written_ = 0;
};

// Writes a whole checkpoint of W = ranks.size() ranks from one process (ranks[r] is rank r's
// state): tests, tools and conversions. Same files, manifest and commit protocol as the writer.
// Returns the committed directory.
StatusOr<std::string> SaveAllRanks(const std::string& root,
                                   const std::vector<CheckpointState>& ranks,
                                   const SaveOptions& options = {});

// The manifest (without files) a state implies, after checking it (rank < world, non-null
// buffers, unique names). Exposed for the reshard and tests.
StatusOr<Manifest> PlanForState(const CheckpointState& state, uint64_t chunk_bytes);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_WRITER_H_
