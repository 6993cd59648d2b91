#include "checkpoint/directory.h"

#include <algorithm>

#include "checkpoint/checksum.h"
#include "checkpoint/lineage.h"
#include "framework/logging.h"

namespace shardema {

namespace {
bool StartsWith(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}
}  // namespace

StatusOr<std::pair<std::string, std::string>> SerializeManifest(const Manifest& manifest) {
  std::string text;
  try {
    text = manifest.ToJson().dump(1) + "\n";
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument("checkpoint meta cannot be serialised as JSON: ", e.what());
  }
  std::string sum = HashToHex(Xxh3(text.data(), text.size())) + "  " + kManifestName + "\n";
  return std::make_pair(std::move(text), std::move(sum));
}

StatusOr<std::string> ReadLatest(const std::string& root) {
  const std::string path = JoinPath(root, kLatestName);
  StatusOr<std::string> text = ReadFileToString(path, 4096);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kResourceExhausted) {
      return DataLoss("'", path, "': larger than 4096 bytes, not a step directory name");
    }
    return text.status();
  }
  std::string name = Trim(*text);
  if (ParseStepDirName(name) < 0) {
    return DataLoss("'", path, "': expected a step directory name like 'step_00000100', found '",
                    name.substr(0, 64), "'");
  }
  return name;
}

StatusOr<std::vector<int64_t>> ListCommittedSteps(const std::string& root) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root));
  std::vector<int64_t> steps;
  for (const std::string& n : names) {
    int64_t s = ParseStepDirName(n);
    if (s >= 0 && PathExists(JoinPath(JoinPath(root, n), kManifestName))) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string StepList(const std::vector<int64_t>& steps) {
  if (steps.empty()) return "none";
  std::string s;
  for (size_t i = 0; i < steps.size(); ++i) s += (i ? ", " : "") + std::to_string(steps[i]);
  return s;
}

StatusOr<std::string> CommittedStepDir(const std::string& root, int64_t step) {
  if (step < 0) return InvalidArgument("checkpoint step ", step, " is negative");
  const std::string path = JoinPath(root, StepDirName(step));
  if (PathExists(JoinPath(path, kManifestName))) return path;
  if (!IsDirectory(root)) return NotFound("checkpoint root '", root, "' does not exist");
  StatusOr<std::vector<int64_t>> steps = ListCommittedSteps(root);
  return NotFound("no committed checkpoint of step ", step, " in '", root, "' (", path, " has no ",
                  kManifestName, "); committed steps: ",
                  steps.ok() ? StepList(*steps) : steps.status().ToString());
}

namespace {
// Of `newer` (committed steps after `latest_dir`'s step `named`), those that do not descend from
// it by their lineages, each with why ("another branch", "no lineage", a manifest error).
std::vector<std::string> OffTheLine(const std::string& root, const std::string& latest_dir,
                                    int64_t named, const std::vector<int64_t>& newer) {
  std::vector<std::string> off;
  StatusOr<Manifest> base = ReadManifest(latest_dir);
  StatusOr<std::optional<Lineage>> base_line =
      base.ok() ? ParseLineage(base->meta, "'" + latest_dir + "'") : base.status();
  for (int64_t s : newer) {
    const std::string dir = JoinPath(root, StepDirName(s));
    const std::string label = "step " + std::to_string(s) + ": ";
    if (!base_line.ok()) {
      off.push_back(label + "cannot tell (" + base_line.status().ToString() + ")");
      continue;
    }
    if (!base_line->has_value()) {
      off.push_back(label + "cannot tell (step " + std::to_string(named) +
                    " has no lineage: written before format version 2)");
      continue;
    }
    StatusOr<Manifest> m = ReadManifest(dir);
    StatusOr<std::optional<Lineage>> line =
        m.ok() ? ParseLineage(m->meta, "'" + dir + "'") : m.status();
    if (!line.ok()) {
      off.push_back(label + "cannot tell (" + line.status().ToString() + ")");
    } else if (!line->has_value()) {
      off.push_back(label + "cannot tell (no lineage: written before format version 2)");
    } else if (!Descends(**line, **base_line, named)) {
      off.push_back(label + "another branch (run " + (*line)->runs.back().id + ", not from step " +
                    std::to_string(named) + "'s run line)");
    }
  }
  return off;
}

// ResolveCheckpointDir / ResolveResumeCheckpoint on a directory; `refuse_newer`: committed steps
// newer than `latest`'s are taken only when they continue its run line (OffTheLine), else an
// error instead of the answer.
StatusOr<std::string> ResolveDir(const std::string& path, bool refuse_newer) {
  if (!IsDirectory(path)) return NotFound("checkpoint path '", path, "' is not a directory");
  if (PathExists(JoinPath(path, kManifestName))) return path;
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommittedSteps(path));
  const std::string latest_path = JoinPath(path, kLatestName);
  if (!PathExists(latest_path)) {
    if (steps.empty()) {
      return NotFound("'", path, "' holds neither ", kManifestName,
                      " (a checkpoint directory) nor '", kLatestName,
                      "' or a committed step directory (a checkpoint root)");
    }
    const std::string newest = JoinPath(path, StepDirName(steps.back()));
    LOG_WARNING << "checkpoint: '" << latest_path
                << "' is missing; using the newest committed checkpoint '" << newest
                << "' (committed steps: " << StepList(steps) << ")";
    return newest;
  }
  ASSIGN_OR_RETURN(std::string name, ReadLatest(path));
  const std::string dir = JoinPath(path, name);
  if (!IsDirectory(dir))
    return NotFound("'", latest_path, "' names '", name, "', which does not exist");
  if (!PathExists(JoinPath(dir, kManifestName))) {
    return NotFound("'", latest_path, "' names '", name, "', which has no ", kManifestName);
  }
  const int64_t named = ParseStepDirName(name);
  if (steps.empty() || steps.back() <= named) return dir;
  std::vector<int64_t> newer;
  for (int64_t s : steps) {
    if (s > named) newer.push_back(s);
  }
  if (refuse_newer) {
    // Newer steps that continue `latest`'s line (lineage.h: a crash between their commits and
    // the `latest` updates) are taken; any other (another branch, or no lineage to tell) refuses.
    const std::vector<std::string> off_line = OffTheLine(path, dir, named, newer);
    if (off_line.empty()) {
      const std::string newest = JoinPath(path, StepDirName(steps.back()));
      LOG_WARNING << "checkpoint: '" << latest_path << "' names " << name
                  << ", but newer committed checkpoints of the same run line exist (steps "
                  << StepList(newer) << ": a crash between a commit and its '" << kLatestName
                  << "' update); resuming from the newest, '" << newest << "'";
      return newest;
    }
    std::string listed;
    for (const std::string& o : off_line) listed += "\n  " + o;
    return FailedPrecondition(
        "'", latest_path, "' names ", name, " but newer committed checkpoints exist in '", path,
        "': steps ", StepList(newer), ", of which these do not continue it:", listed,
        "\nchoose one explicitly: --resume-step ", steps.back(), " (the newest) or --resume-step ",
        named, " ('", kLatestName, "'; add --discard-newer-steps to delete the steps after it)");
  }
  const std::string newest = JoinPath(path, StepDirName(steps.back()));
  LOG_WARNING << "checkpoint: '" << latest_path << "' names " << name
              << ", but newer committed checkpoints exist"
              << " (steps " << StepList(newer) << "); using the newest, '" << newest << "'";
  return newest;
}
}  // namespace

StatusOr<std::string> ResolveCheckpointDir(const std::string& path) {
  return ResolveDir(path, false);
}

StatusOr<std::vector<int64_t>> DiscardStepsAfter(const std::string& root, int64_t step) {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommittedSteps(root));
  std::vector<int64_t> newer;
  for (int64_t s : steps) {
    if (s > step) newer.push_back(s);
  }
  if (newer.empty()) return newer;
  StatusOr<std::string> latest = ReadLatest(root);
  if (!latest.ok() || ParseStepDirName(*latest) > step) {
    RETURN_IF_ERROR(WriteFileAtomic(JoinPath(root, kLatestName), StepDirName(step) + "\n"));
  }
  for (int64_t s : newer) {
    const std::string doomed = JoinPath(root, ".tmp_delete_" + StepDirName(s));
    RETURN_IF_ERROR(RenamePath(JoinPath(root, StepDirName(s)), doomed));
    RETURN_IF_ERROR(RemoveTree(doomed));
  }
  return newer;
}

StatusOr<std::string> ResolveResumeCheckpoint(const std::string& root,
                                              std::optional<int64_t> step) {
  if (step) return CommittedStepDir(root, *step);
  return ResolveDir(root, true);
}

StatusOr<Manifest> ReadManifest(const std::string& dir) {
  const std::string mpath = JoinPath(dir, kManifestName);
  const std::string spath = JoinPath(dir, kManifestChecksumName);
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(mpath, uint64_t(1) << 31));
  ASSIGN_OR_RETURN(std::string sum, ReadFileToString(spath, 4096));
  ASSIGN_OR_RETURN(uint64_t want, HashFromHex(sum.substr(0, 16), "'" + spath + "'"));
  uint64_t got = Xxh3(text.data(), text.size());
  if (want != got) {
    return DataLoss("'", mpath, "': checksum mismatch: ", kManifestChecksumName, " says ",
                    HashToHex(want), ", the file hashes to ", HashToHex(got),
                    " (corrupt or edited)");
  }
  return Manifest::Parse(text, "manifest '" + mpath + "'");
}

namespace {
// Deletes `path` now, or (deferred_removals set) renames it to a ".tmp_delete_" name and queues it.
Status RemoveOrDefer(const std::string& root, const std::string& name,
                     const CommitOptions& options) {
  const std::string path = JoinPath(root, name);
  if (options.deferred_removals == nullptr) return RemoveTree(path);
  std::string queued = path;
  if (!StartsWith(name, ".tmp_delete_")) {
    queued = JoinPath(root, ".tmp_delete_" + (StartsWith(name, ".tmp_") ? name.substr(5) : name));
    if (PathExists(queued)) RETURN_IF_ERROR(RemoveTree(queued));
    RETURN_IF_ERROR(RenamePath(path, queued));
  }
  options.deferred_removals->push_back(queued);
  return Status::Ok();
}
}  // namespace

StatusOr<std::string> PrepareStepDir(const std::string& root, int64_t step,
                                     const CommitOptions& options) {
  if (step < 0) return InvalidArgument("checkpoint step must be >= 0, got ", step);
  RETURN_IF_ERROR(MakeDirs(root));
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root));
  for (const std::string& n : names) {
    if (options.skip_queued_deletions && StartsWith(n, ".tmp_delete_")) continue;
    if (StartsWith(n, ".tmp_") || n == std::string(kLatestName) + ".tmp") {
      LOG_INFO << "checkpoint: removing leftover '" << JoinPath(root, n) << "'";
      RETURN_IF_ERROR(RemoveOrDefer(root, n, options));
    }
  }
  const std::string name = StepDirName(step);
  const std::string final_dir = JoinPath(root, name);
  if (PathExists(final_dir)) {
    StatusOr<std::string> latest = ReadLatest(root);
    const std::string named =
        latest.ok() ? "'" + *latest + "'" : "nothing (" + latest.status().ToString() + ")";
    const bool committed = PathExists(JoinPath(final_dir, kManifestName));
    if (committed && latest.ok() && *latest == name) {
      return AlreadyExists("checkpoint '", final_dir,
                           "' exists and is the latest; refusing to overwrite it");
    }
    if (committed && !options.replace_committed) {
      return AlreadyExists(
          "checkpoint '", final_dir, "' is committed but '", kLatestName, "' names ", named,
          "; refusing to replace a committed checkpoint (resume from it, or choose explicitly "
          "to discard the newer steps)");
    }
    LOG_WARNING << "checkpoint: '" << final_dir << "' exists "
                << (committed ? "(committed)" : "(not committed)") << " but '" << kLatestName
                << "' names " << named << "; moving it aside to save step " << step << " again";
    const std::string aside = ".tmp_orphan_" + name;
    RETURN_IF_ERROR(RenamePath(final_dir, JoinPath(root, aside)));
    RETURN_IF_ERROR(RemoveOrDefer(root, aside, options));
  }
  // No fsync here: a temp directory lost in a crash loses nothing; the commit fsyncs ROOT.
  const std::string tmp = JoinPath(root, TmpStepDirName(step));
  RETURN_IF_ERROR(MakeDirs(tmp));
  return tmp;
}

Status AbandonStepDir(const std::string& root, int64_t step) {
  return RemoveTree(JoinPath(root, TmpStepDirName(step)));
}

namespace {
// Removes (or defers the removal of) the oldest committed checkpoints so that keep_last of those up
// to `keep` remain; a committed step newer than `keep` is neither counted nor deleted. Each is
// first renamed to a ".tmp_" name, so a crash never leaves a half-deleted directory that looks
// committed.
Status ApplyRetention(const std::string& root, int64_t keep, const CommitOptions& options) {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCommittedSteps(root));
  const auto upto = std::upper_bound(steps.begin(), steps.end(), keep);
  int64_t excess = int64_t(upto - steps.begin()) - std::max(options.keep_last, 1);
  for (size_t i = 0; i < steps.size() && excess > 0 && steps[i] < keep; ++i) {
    const std::string doomed = ".tmp_delete_" + StepDirName(steps[i]);
    RETURN_IF_ERROR(RenamePath(JoinPath(root, StepDirName(steps[i])), JoinPath(root, doomed)));
    RETURN_IF_ERROR(RemoveOrDefer(root, doomed, options));
    --excess;
  }
  return Status::Ok();
}
}  // namespace

StatusOr<std::string> CommitStepDir(const std::string& root, const Manifest& manifest,
                                    const CommitOptions& options) {
  const std::string tmp = JoinPath(root, TmpStepDirName(manifest.step));
  const std::string name = StepDirName(manifest.step);
  const std::string final_dir = JoinPath(root, name);
  for (const FileEntry& f : manifest.files) {
    if (!PathExists(JoinPath(tmp, f.name))) {
      return NotFound("commit of step ", manifest.step, ": '", JoinPath(tmp, f.name),
                      "' is missing");
    }
  }
  ASSIGN_OR_RETURN(auto files, SerializeManifest(manifest));
  const std::string& text = files.first;
  const std::string& sum = files.second;
  RETURN_IF_ERROR(
      WriteFileAtomic(JoinPath(tmp, kManifestName), text, options.fsync, options.fault_hook));
  RETURN_IF_ERROR(WriteFileAtomic(JoinPath(tmp, kManifestChecksumName), sum, options.fsync,
                                  options.fault_hook));
  if (options.fsync) RETURN_IF_ERROR(SyncDir(tmp));
  RETURN_IF_ERROR(RenamePath(tmp, final_dir));
  if (options.fsync) RETURN_IF_ERROR(SyncDir(root));
  RETURN_IF_ERROR(
      WriteFileAtomic(JoinPath(root, kLatestName), name + "\n", options.fsync, options.fault_hook));
  RETURN_IF_ERROR(ApplyRetention(root, manifest.step, options));
  return final_dir;
}

}  // namespace shardema
