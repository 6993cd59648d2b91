// The checkpoint directory protocol (FORMAT.md "Directory layout" and "Commit protocol"): the
// local, single-process steps that rank 0 performs around a save, and how readers find the
// committed checkpoint. The collective part (who calls what when) is in writer.h.
//
//   ROOT/                       a --ckpt-dir
//     latest                    "step_00000200\n", replaced atomically (temp + fsync + rename)
//     step_00000100/            committed checkpoints (manifest.json present = complete)
//     step_00000200/
//     .tmp_step_00000300/       a save in progress or abandoned by a crash: ignored by readers,
//                               removed by the next PrepareStepDir
//
// Assumes one writing job per ROOT. Threading: functions are thread-safe but a ROOT must not be
// prepared/committed by two threads at once.
#ifndef SHARDEMA_CHECKPOINT_DIRECTORY_H_
#define SHARDEMA_CHECKPOINT_DIRECTORY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/posix_file.h"
#include "framework/status.h"

namespace shardema {

struct CommitOptions {
  int keep_last = 2;  // committed checkpoints kept (>= 1), the new one included
  bool fsync = true;
  WriteFaultHook fault_hook;  // applied to manifest / latest writes (tests)
  // When set, directories to delete (leftovers, checkpoints beyond keep_last) are only renamed
  // to ".tmp_delete_*" names and their paths appended here; the caller removes them later (e.g.
  // off the training thread: deleting large files can take a while). Readers ignore them and the
  // next PrepareStepDir reports them again if they are still there.
  std::vector<std::string>* deferred_removals = nullptr;
  // PrepareStepDir leaves ".tmp_delete_*" entries alone (the caller's deleter owns them).
  bool skip_queued_deletions = false;
  // PrepareStepDir may replace a committed step_N that `latest` does not name (e.g. a run resumed
  // from an older step on purpose). Off: such a save fails with kAlreadyExists.
  bool replace_committed = false;
};

// Before a save of `step`: creates ROOT if needed, removes leftovers of crashed saves (".tmp_*"
// entries, "latest.tmp"; see CommitOptions::deferred_removals), moves aside a step_N directory of
// the same step that is not committed (no manifest.json), and creates the empty ROOT/.tmp_step_N.
// Returns that path. A committed step_N is never replaced unless options.replace_committed.
// Errors: kAlreadyExists when step_N is committed (naming what `latest` names); errno errors
// naming the path.
StatusOr<std::string> PrepareStepDir(const std::string& root, int64_t step,
                                     const CommitOptions& options);

// After every rank file of `manifest` is durable in ROOT/.tmp_step_N: writes manifest.json then
// manifest.xxh3 (each temp + fsync + rename), fsyncs the directory, renames it to ROOT/step_N,
// fsyncs ROOT, points ROOT/latest at it, then removes the oldest committed checkpoints beyond
// keep_last among the steps up to step_N: a committed step newer than the one saved is neither
// counted nor deleted (each is first renamed to a ".tmp_" name, so a crash never leaves a
// half-deleted directory that looks committed). Returns ROOT/step_N.
StatusOr<std::string> CommitStepDir(const std::string& root, const Manifest& manifest,
                                    const CommitOptions& options);

// Removes ROOT/.tmp_step_N of a save that failed (no error when absent).
Status AbandonStepDir(const std::string& root, int64_t step);

// Steps of the committed step_N directories of ROOT, ascending (a directory counts when it holds
// manifest.json).
StatusOr<std::vector<int64_t>> ListCommittedSteps(const std::string& root);

// The directory name `ROOT/latest` names. Errors: kNotFound naming ROOT/latest; kDataLoss when its
// content is not a step directory name.
StatusOr<std::string> ReadLatest(const std::string& root);

// `path` is either a checkpoint directory (it holds manifest.json) or a ROOT. For a ROOT, `latest`
// is a hint: the newest committed step_N (ListCommittedSteps) is returned when `latest` is missing
// or names an older step (a crash between a commit and its `latest` update, or a stale `latest`);
// that choice is logged as a warning. Errors: kNotFound naming what is missing: the path, any
// committed directory, or the directory `latest` names when it names a step that is not
// committed (never a fallback to an older step); kDataLoss for an unreadable `latest`.
StatusOr<std::string> ResolveCheckpointDir(const std::string& path);

// The checkpoint a --resume of ROOT loads. With `step`: ROOT/step_<step>, which must be
// committed. Without: as ResolveCheckpointDir when every committed step newer than the one
// `latest` names continues its run line (checkpoint/lineage.h: a crash between their commits and
// the `latest` updates; an unattended restart goes on from the newest, with a warning); when any
// does not (another branch, left by a --resume-step run, or a checkpoint without a lineage to
// tell), kFailedPrecondition listing those steps with why and naming --resume-step, since a
// `latest` must not silently roll a run back or forward onto another branch. Errors: those of
// ResolveCheckpointDir;
// kNotFound for a `step` that is not committed (listing the committed steps).
StatusOr<std::string> ResolveResumeCheckpoint(const std::string& root, std::optional<int64_t> step);

// ROOT/step_<step> when it is committed. Errors: kInvalidArgument for a negative step; kNotFound
// naming the directory and listing the committed steps.
StatusOr<std::string> CommittedStepDir(const std::string& root, int64_t step);

// Deletes the committed checkpoints of ROOT newer than `step` (each first renamed to a ".tmp_"
// name) and returns their steps; an explicit user choice (train_mlp --discard-newer-steps). If
// `latest` named one of them it is pointed at step_<step> first. Errors: errno errors naming the
// path.
StatusOr<std::vector<int64_t>> DiscardStepsAfter(const std::string& root, int64_t step);

// "100, 200, 300" ("none" for an empty list).
std::string StepList(const std::vector<int64_t>& steps);

// Reads DIR/manifest.json, checks it against DIR/manifest.xxh3, parses and validates it
// (Manifest::FromJson). Errors: kNotFound for a missing file, kDataLoss naming the file for a
// checksum mismatch, corrupt JSON or an inconsistent manifest.
StatusOr<Manifest> ReadManifest(const std::string& checkpoint_dir);

// The two manifest files' contents for `manifest` (manifest.json text, manifest.xxh3 text).
// Errors: kInvalidArgument when the meta JSON cannot be serialised (e.g. invalid UTF-8).
StatusOr<std::pair<std::string, std::string>> SerializeManifest(const Manifest& manifest);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_DIRECTORY_H_
