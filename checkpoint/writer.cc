#include "checkpoint/writer.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <tuple>
#include <utility>

#include "checkpoint/background_commit.h"
#include "checkpoint/checksum.h"
#include "checkpoint/collective_bytes.h"
#include "checkpoint/rank_file.h"
#include "framework/logging.h"

namespace shardema {

using nlohmann::json;

StatusOr<Manifest> PlanForState(const CheckpointState& state, uint64_t chunk_bytes) {
  const int world = state.layout.world_size();
  if (state.rank < 0 || state.rank >= world) {
    return InvalidArgument("checkpoint state: rank ", state.rank,
                           " outside the layout's world size ", world);
  }
  std::vector<SlotEntry> slots;
  for (const SlotView& v : state.slots) {
    if (v.data == nullptr && state.layout.local_numel() > 0) {
      return InvalidArgument("checkpoint state: slot '", v.name, "' has no data (",
                             state.layout.local_numel(), " elements expected)");
    }
    SlotEntry e;
    e.name = v.name;
    e.dtype = v.dtype;
    e.params = v.params;
    slots.push_back(e);
  }
  std::vector<BufferEntry> buffers;
  for (const BufferView& b : state.buffers) {
    for (int64_t d : b.shape) {
      if (d < 0)
        return InvalidArgument("checkpoint state: buffer '", b.name, "' has a negative dim");
    }
    if (b.data == nullptr && NumElements(b.shape) > 0) {
      return InvalidArgument("checkpoint state: buffer '", b.name, "' has no data");
    }
    BufferEntry e;
    e.name = b.name;
    e.shape = b.shape;
    e.dtype = b.dtype;
    buffers.push_back(e);
  }
  StatusOr<Manifest> m = Manifest::Plan(state.step, state.layout, std::move(slots),
                                        std::move(buffers), state.meta, chunk_bytes);
  if (!m.ok()) return m.status().WithContext("checkpoint state");
  return m;
}

namespace {
// Identifies what every rank must agree on: everything in the manifest but the meta and files.
std::string PlanFingerprint(const Manifest& plan) {
  Manifest m = plan;
  m.meta = json::object();
  m.files.clear();
  const std::string text = m.ToJson().dump();
  return HashToHex(Xxh3(text.data(), text.size()));
}

std::string DumpLossless(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<const void*> SlotPointers(const CheckpointState& s) {
  std::vector<const void*> out;
  for (const SlotView& v : s.slots) out.push_back(v.data);
  return out;
}
std::vector<const void*> BufferPointers(const CheckpointState& s) {
  std::vector<const void*> out;
  for (const BufferView& b : s.buffers) out.push_back(b.data);
  return out;
}

RankFileWriteOptions RankOptions(const SaveOptions& o) {
  RankFileWriteOptions r;
  r.io_bytes = o.io_bytes;
  r.fsync = o.fsync;
  r.fault_hook = o.fault_hook;
  return r;
}

CommitOptions CommitOpts(const SaveOptions& o, std::vector<std::string>* deferred = nullptr) {
  CommitOptions c;
  c.keep_last = o.keep_last;
  c.fsync = o.fsync;
  c.fault_hook = o.fault_hook;
  c.deferred_removals = deferred;
  c.replace_committed = o.replace_committed;
  return c;
}
}  // namespace

struct CheckpointWriter::Pending {
  Manifest plan;
  std::string tmp_dir;
  int file_rank = 0;            // the rank file this rank writes a part of
  uint64_t begin = 0, end = 0;  // the part
  std::vector<const void*> slot_ptrs;
  std::vector<const void*> buffer_ptrs;
  // Background snapshot (kInBackground): the staging destination of each section, copied and
  // checksummed in one pass while the file is written (slot_ptrs/buffer_ptrs are the sources).
  RankFileSnapshot snapshot;
  std::mutex mu;
  std::condition_variable cv;
  bool snapshot_taken = true;
  std::thread thread;
  std::atomic<bool> done{false};
  StatusOr<RankFilePart> result = Status(StatusCode::kAborted, "rank file not written");
  // Poll's agreement: calls so far in this phase, and the all-reduce in flight (its operands live
  // here).
  int64_t polls = 0;
  std::unique_ptr<Work> agreement;
  float agree_mine = 0.f, agree_sum = 0.f;
  // The second phase (StartCommit): the ranks have agreed on the file reports and rank 0's commit
  // runs in `commit` (null on the other ranks) until FinishCommit broadcasts its outcome.
  bool committing = false;
  std::unique_ptr<BackgroundCommit> commit;

  // Joins the writer thread; `commit`'s destructor joins rank 0's commit.
  ~Pending() {
    if (thread.joinable()) thread.join();
  }

  // This rank's part of the current phase is done: its file, then (rank 0) the commit.
  bool LocalPartDone() const {
    if (!committing) return done.load(std::memory_order_acquire);
    return commit == nullptr || commit->done();
  }

  // Runs on the background thread of an asynchronous save (or the caller's, for Save). The
  // caller's memory is read until the snapshot is copied (kInBackground: released as soon as the
  // copy is made, while the file is still being written), or (in place: slot_ptrs and
  // buffer_ptrs are the caller's) until the file is written.
  void Write(const SaveOptions& options, bool background) {
    const bool copy_here = background && options.snapshot == SaveOptions::Snapshot::kInBackground;
    if (copy_here) {
      snapshot.on_copied = [&] { ReleaseSnapshot(); };
    } else if (!background) {
      ReleaseSnapshot();  // none needed: Save's caller waits
    }
    try {
      result = WriteRankFilePart(JoinPath(tmp_dir, RankFileName(file_rank)), plan, file_rank, begin,
                                 end, slot_ptrs, buffer_ptrs, RankOptions(options),
                                 copy_here ? &snapshot : nullptr);
    } catch (const std::bad_alloc&) {
      result = ResourceExhausted("writing rank ", file_rank, "'s file: out of memory");
    }
    snapshot.on_copied = nullptr;  // it refers to this call's locals
    ReleaseSnapshot();             // in place, or a write that failed before its copy was complete
    done.store(true, std::memory_order_release);
  }

  void ReleaseSnapshot() {
    {
      std::lock_guard<std::mutex> l(mu);
      snapshot_taken = true;
    }
    cv.notify_all();
  }

  void WaitSnapshot() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [this] { return snapshot_taken; });
  }
};

CheckpointWriter::CheckpointWriter(std::string root, Communicator* comm, SaveOptions options)
    : root_(std::move(root)),
      comm_(comm),
      options_(std::move(options)),
      deleter_(std::make_unique<BackgroundDeleter>()) {}

CommitOptions CheckpointWriter::CommitOpts() {
  CommitOptions c = ::shardema::CommitOpts(options_, &removals_);
  c.skip_queued_deletions = !first_prepare_;  // after the first save, .tmp_delete_* are ours
  return c;
}

Status CheckpointWriter::Finish() {
  Status s = Wait();
  if (deleter_ != nullptr) deleter_->Drain();
  return s;
}

CheckpointWriter::~CheckpointWriter() {
  if (pending_ == nullptr) return;
  const int64_t step = pending_->plan.step;
  const bool committing = pending_->committing;
  pending_.reset();  // joins the writer thread and rank 0's commit
  LOG_WARNING << "checkpoint: the save of step " << step << " into '" << root_ << "' was "
              << (committing ? "committed by rank 0 but its outcome was never agreed"
                             : "never committed")
              << " (call Finish() before destroying the writer)";
}

StatusOr<std::unique_ptr<CheckpointWriter::Pending>> CheckpointWriter::Begin(
    const CheckpointState& state) {
  const int rank = RankOf(comm_), world = WorldSizeOf(comm_), copies = options_.replicas;
  Status local;
  if (copies < 1 || world % copies != 0) {
    local = InvalidArgument("checkpoint writer: ", copies, " replicas do not divide the ", world,
                            " ranks");
  } else if (state.layout.world_size() != world / copies || state.rank != FileRank()) {
    local =
        InvalidArgument("checkpoint state is rank ", state.rank, " of ", state.layout.world_size(),
                        " but the communicator's rank ", rank, " of ", world, " with ", copies,
                        " replicas holds rank ", FileRank(), " of ", world / copies);
  }
  auto p = std::make_unique<Pending>();
  std::string fingerprint;
  if (local.ok()) {
    StatusOr<Manifest> plan = Plan(state);
    if (plan.ok()) {
      p->plan = std::move(plan).value();
      p->file_rank = FileRank();
      std::tie(p->begin, p->end) = Part(p->plan);
      fingerprint = PlanFingerprint(p->plan);
    } else {
      local = plan.status();
    }
  }
  bool prepared = false;
  if (local.ok() && rank == 0) {
    StatusOr<std::string> tmp = PrepareStepDir(root_, state.step, CommitOpts());
    first_prepare_ = false;
    deleter_->Add(removals_);
    removals_.clear();
    prepared = tmp.ok();
    if (!tmp.ok()) local = tmp.status();
  }
  json mine = {{"status", EncodeStatus(local)}, {"plan", fingerprint}};
  ASSIGN_OR_RETURN(std::vector<std::string> all, AllGatherBytes(comm_, DumpLossless(mine)));
  Status agreed;
  std::string plan0;
  for (int r = 0; r < world && agreed.ok(); ++r) {
    json j = json::parse(all[size_t(r)], nullptr, false);
    if (j.is_discarded()) {
      agreed = Internal("rank ", r, " sent an unreadable save report");
      break;
    }
    Status s = DecodeStatus(j.value("status", std::string()));
    std::string fp = j.value("plan", std::string());
    if (!s.ok()) {
      agreed = Status(s.code(), "save of step " + std::to_string(state.step) + ": rank " +
                                    std::to_string(r) + " of " + std::to_string(world) + ": " +
                                    s.message());
    } else if (r == 0) {
      plan0 = fp;
    } else if (fp != plan0) {
      agreed = InvalidArgument("save of step ", state.step, ": rank ", r,
                               "'s checkpoint state differs from rank 0's "
                               "(step, layout, slot names/dtypes or buffers)");
    }
  }
  if (!agreed.ok()) {
    if (prepared) AbandonStepDir(root_, state.step).IgnoreError();
    return agreed;
  }
  p->tmp_dir = JoinPath(root_, TmpStepDirName(state.step));
  return p;
}

std::string EncodeCommitResult(const CommitResult& r) {
  return DumpLossless(json{{"code", int(r.status.code())},
                           {"message", r.status.message()},
                           {"step", r.step},
                           {"dir", r.dir}});
}

StatusOr<CommitResult> DecodeCommitResult(const std::string& bytes) {
  const json j = json::parse(bytes, nullptr, false);
  auto bad = [&bytes](const char* what) {
    return Internal("commit result from rank 0: ", what, " in '", bytes.substr(0, 200), "'");
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  const auto code = j.find("code"), message = j.find("message"), step = j.find("step"),
             dir = j.find("dir");
  if (code == j.end() || !code->is_number_integer() || message == j.end() ||
      !message->is_string() || step == j.end() || !step->is_number_integer() || dir == j.end() ||
      !dir->is_string()) {
    return bad("a missing or mistyped field (code, message, step, dir)");
  }
  const int c = code->get<int>();
  if (c < 0 || c > int(StatusCode::kUnimplemented)) return bad("an unknown status code");
  CommitResult r;
  r.status = Status(StatusCode(c), message->get<std::string>());
  r.step = step->get<int64_t>();
  r.dir = dir->get<std::string>();
  if (r.status.ok() && r.dir.empty()) return bad("a committed result without a directory");
  return r;
}

namespace {
json PartToJson(const RankFilePart& p) {
  return {{"rank", p.rank},
          {"begin", p.begin},
          {"end", p.end},
          {"chunk_xxh3", EncodeHashList(p.chunk_xxh3)}};
}

StatusOr<RankFilePart> PartFromJson(const json& j, uint64_t chunk_bytes, const std::string& what) {
  RankFilePart p;
  if (!j.is_object() || !j.value("rank", json()).is_number_integer() ||
      !j.value("begin", json()).is_number_unsigned() ||
      !j.value("end", json()).is_number_unsigned() || !j.value("chunk_xxh3", json()).is_string()) {
    return Internal(what, ": malformed part report");
  }
  p.rank = j["rank"].get<int>();
  p.begin = j["begin"].get<uint64_t>();
  p.end = j["end"].get<uint64_t>();
  if (p.end < p.begin) return Internal(what, ": part [", p.begin, ", ", p.end, ")");
  ASSIGN_OR_RETURN(p.chunk_xxh3, DecodeHashList(j["chunk_xxh3"].get<std::string>(),
                                                NumChunks(p.end - p.begin, chunk_bytes), what));
  return p;
}

// The manifest of a save whose ranks reported `reports` (all-gathered, one per rank; rank w wrote
// part w / S of rank file w % S, S = the plan's world size): `plan` with every rank file's entry,
// after checking each report. Every rank decides the same, so a failed write fails the save on
// every rank at the same call.
StatusOr<Manifest> ManifestFromReports(const Manifest& plan,
                                       const std::vector<std::string>& reports) {
  const int world = int(reports.size()), files = plan.layout.world_size();
  Manifest manifest = plan;
  std::vector<std::vector<RankFilePart>> parts(static_cast<size_t>(files));
  for (int w = 0; w < world; ++w) {
    const std::string what = "save of step " + std::to_string(plan.step) + ": rank " +
                             std::to_string(w) + " of " + std::to_string(world);
    const json j = json::parse(reports[size_t(w)], nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Internal(what, ": unreadable file report");
    Status s = DecodeStatus(j.value("status", std::string()));
    if (!s.ok()) return Status(s.code(), what + ": " + s.message());
    const auto part = j.find("part");
    if (part == j.end()) return Internal(what, ": file report without a part");
    ASSIGN_OR_RETURN(RankFilePart p, PartFromJson(*part, manifest.chunk_bytes, what));
    const std::pair<uint64_t, uint64_t> expected = PartRange(
        manifest.RankFileBytes(w % files), manifest.chunk_bytes, w / files, world / files);
    if (p.rank != w % files || p.begin != expected.first || p.end != expected.second) {
      return Internal(what, ": reported bytes [", p.begin, ", ", p.end, ") of rank ", p.rank,
                      "'s file, expected [", expected.first, ", ", expected.second, ") of rank ",
                      w % files, "'s");
    }
    parts[size_t(w % files)].push_back(std::move(p));
  }
  for (int r = 0; r < files; ++r) {
    ASSIGN_OR_RETURN(FileEntry f, FileEntryFromParts(r, manifest.RankFileBytes(r),
                                                     manifest.chunk_bytes, parts[size_t(r)]));
    manifest.files.push_back(std::move(f));
  }
  return manifest;
}
}  // namespace

Status CheckpointWriter::CompleteAgreement() {
  Pending& p = *pending_;
  if (p.agreement == nullptr) return Status::Ok();
  // Every rank issued it at the same Poll call (normally complete by now): complete it before
  // any other collective.
  Status st = p.agreement->Wait();
  p.agreement.reset();
  if (st.ok()) return st;
  const int64_t step = p.plan.step;
  pending_.reset();
  return st.WithContext("save of step " + std::to_string(step) + ": agreement");
}

Status CheckpointWriter::StartCommit(bool background) {
  RETURN_IF_ERROR(CompleteAgreement());
  Pending& p = *pending_;
  if (p.thread.joinable()) p.thread.join();
  const int rank = RankOf(comm_);
  json mine = {{"status", EncodeStatus(p.result.status())}};
  if (p.result.ok()) mine["part"] = PartToJson(*p.result);
  StatusOr<std::vector<std::string>> all = AllGatherBytes(comm_, DumpLossless(mine));
  if (!all.ok()) {
    pending_.reset();
    return all.status();
  }
  StatusOr<Manifest> manifest = ManifestFromReports(p.plan, *all);
  if (!manifest.ok()) {
    if (rank == 0) AbandonStepDir(root_, p.plan.step).IgnoreError();
    pending_.reset();
    return manifest.status();
  }
  p.committing = true;
  p.polls = 0;
  if (rank == 0) {
    p.commit = std::make_unique<BackgroundCommit>(root_, std::move(manifest).value(), CommitOpts(),
                                                  deleter_.get(), background);
  }
  return Status::Ok();
}

Status CheckpointWriter::FinishCommit() {
  RETURN_IF_ERROR(CompleteAgreement());
  CommitResult outcome;
  if (pending_->commit != nullptr) outcome = pending_->commit->Join();  // rank 0
  StatusOr<std::string> agreed = BroadcastBytes(comm_, EncodeCommitResult(outcome), 0);
  const uint64_t mine = pending_->end - pending_->begin;  // written: the reports were agreed
  pending_.reset();
  if (!agreed.ok()) return agreed.status();
  ASSIGN_OR_RETURN(CommitResult decided, DecodeCommitResult(*agreed));
  if (!decided.status.ok()) return decided.status;
  last_commit_ = std::move(decided);
  bytes_written_ += mine;
  return Status::Ok();
}

Status CheckpointWriter::Commit() {
  if (!pending_->committing) RETURN_IF_ERROR(StartCommit(/*background=*/false));
  return FinishCommit();
}

StatusOr<bool> CheckpointWriter::NextPhase() {
  if (!pending_->committing) {
    RETURN_IF_ERROR(StartCommit(/*background=*/true));
    return false;
  }
  RETURN_IF_ERROR(FinishCommit());
  return true;
}

Status CheckpointWriter::Save(const CheckpointState& state) {
  RETURN_IF_ERROR(Wait());
  ASSIGN_OR_RETURN(pending_, Begin(state));
  pending_->slot_ptrs = SlotPointers(state);
  pending_->buffer_ptrs = BufferPointers(state);
  pending_->Write(options_, /*background=*/false);
  return Commit();
}

StatusOr<Manifest> CheckpointWriter::Plan(const CheckpointState& state) const {
  ASSIGN_OR_RETURN(Manifest plan, PlanForState(state, options_.chunk_bytes));
  const uint64_t copies = uint64_t(std::max(1, options_.replicas));
  if (copies > 1) {  // about 8 chunks per replica in the largest file (SaveOptions::replicas)
    uint64_t largest = 0;
    for (int r = 0; r < plan.layout.world_size(); ++r)
      largest = std::max(largest, plan.RankFileBytes(r));
    const uint64_t c = AlignUp((largest + 8 * copies - 1) / (8 * copies), kDirectIoAlign);
    plan.chunk_bytes = std::min(plan.chunk_bytes, c);
  }
  return plan;
}

int CheckpointWriter::FileRank() const {
  return RankOf(comm_) % std::max(1, WorldSizeOf(comm_) / std::max(1, options_.replicas));
}

std::pair<uint64_t, uint64_t> CheckpointWriter::Part(const Manifest& plan) const {
  const int files = plan.layout.world_size();
  return PartRange(plan.RankFileBytes(FileRank()), plan.chunk_bytes, RankOf(comm_) / files,
                   WorldSizeOf(comm_) / files);
}

uint64_t CheckpointWriter::StagingBytes(const Manifest& plan) const {
  const std::pair<uint64_t, uint64_t> part = Part(plan);
  auto staged = [&part](uint64_t offset, uint64_t bytes) {
    return AlignUp(BytesInRange(offset, bytes, part.first, part.second), kDirectIoAlign);
  };
  uint64_t total = 0;
  for (const SlotEntry& s : plan.slots) total += staged(s.offset, s.bytes_per_rank);
  if (FileRank() == 0) {
    for (const BufferEntry& b : plan.buffers) total += staged(b.offset, b.bytes);
  }
  return total;
}

bool CheckpointWriter::GrowStaging(uint64_t bytes, bool touch) {
  if (staging_bytes_ >= bytes) return true;
  staging_ = Buffer();
  staging_bytes_ = 0;
  // At least 64 KiB, so page-aligned (framework/device.h); from 8 MiB on huge pages: direct I/O
  // pinned the 4 KiB pages of an 84 MB staging at about the CPU cost of the snapshot copy itself
  // (8.4M MLP, W=2, perf), one 2 MiB page stands for 512 of them.
  StatusOr<Buffer> b = Buffer::Allocate(size_t(std::max<uint64_t>(bytes, 64 << 10)), Device::Cpu());
  if (!b.ok()) return false;
  staging_ = std::move(b).value();
  staging_bytes_ = bytes;
  if (touch) std::memset(staging_.data(), 0, size_t(bytes));
  return true;
}

Status CheckpointWriter::ReserveStaging(const CheckpointState& state) {
  ASSIGN_OR_RETURN(Manifest plan, Plan(state));
  if (options_.snapshot == SaveOptions::Snapshot::kInPlace) return Status::Ok();  // none needed
  const uint64_t total = StagingBytes(plan);
  if (!GrowStaging(total, /*touch=*/true)) {
    return ResourceExhausted("asynchronous saves: cannot allocate ", total,
                             " bytes of staging memory on rank ", state.rank);
  }
  return Status::Ok();
}

Status CheckpointWriter::SaveAsync(const CheckpointState& state) {
  RETURN_IF_ERROR(Wait());
  ASSIGN_OR_RETURN(pending_, Begin(state));
  Pending& p = *pending_;
  const int rank = RankOf(comm_);
  if (options_.snapshot == SaveOptions::Snapshot::kInPlace) {
    // No snapshot: the writer thread reads the caller's memory until WaitSnapshot.
    p.slot_ptrs = SlotPointers(state);
    p.buffer_ptrs = BufferPointers(state);
  } else {
    // Snapshot into the staging buffer: slots, then (rank 0) buffers, each page-aligned (so that
    // the rank file writes them to the device directly, posix_file.h), copied by the writer
    // thread, checksumming as it copies (RankFileSnapshot).
    const uint64_t total = StagingBytes(p.plan);
    if (!GrowStaging(total, /*touch=*/false)) {
      p.result = ResourceExhausted("asynchronous save of step ", p.plan.step, ": cannot allocate ",
                                   total, " bytes of staging memory on rank ", rank);
      p.done.store(true);
      return Status::Ok();  // reported collectively by the commit
    }
    // (Only each section's bytes inside this rank's part are staged: BytesInRange.)
    uint64_t off = 0;
    auto stage = [&](const void* src, uint64_t offset, uint64_t n, std::vector<const void*>* ptrs,
                     std::vector<char*>* stages) {
      ptrs->push_back(src);
      stages->push_back(staging_.as<char>() + off);
      off += AlignUp(BytesInRange(offset, n, p.begin, p.end), kDirectIoAlign);
    };
    for (size_t i = 0; i < p.plan.slots.size(); ++i) {
      const SlotEntry& e = p.plan.slots[i];
      stage(state.slots[i].data, e.offset, e.bytes_per_rank, &p.slot_ptrs, &p.snapshot.slots);
    }
    if (p.file_rank == 0) {
      for (size_t i = 0; i < p.plan.buffers.size(); ++i) {
        const BufferEntry& e = p.plan.buffers[i];
        stage(state.buffers[i].data, e.offset, e.bytes, &p.buffer_ptrs, &p.snapshot.buffers);
      }
    }
  }
  p.snapshot_taken = false;  // released by the writer thread
  Pending* raw = &p;
  const SaveOptions* opts = &options_;
  p.thread = std::thread([raw, opts] { raw->Write(*opts, /*background=*/true); });
  return Status::Ok();
}

StatusOr<bool> CheckpointWriter::Poll() {
  if (pending_ == nullptr) return true;
  Pending& p = *pending_;
  const bool local_done = p.LocalPartDone();
  if (WorldSizeOf(comm_) == 1) {
    if (!local_done) return false;
    return NextPhase();
  }
  ++p.polls;
  if (p.agreement != nullptr) {
    // Issued one Poll call ago on every rank: normally complete by now.
    RETURN_IF_ERROR(CompleteAgreement());
    if (p.agree_sum == float(comm_->world_size())) return NextPhase();
  }
  if (p.polls % std::max(1, options_.agree_every) == 0 || p.polls == 1) {
    p.agree_mine = local_done ? 1.f : 0.f;
    p.agree_sum = 0.f;
    StatusOr<std::unique_ptr<Work>> w =
        comm_->AllReduceAsync(&p.agree_mine, &p.agree_sum, 1, DType::kF32);
    if (!w.ok()) {
      const int64_t step = p.plan.step;
      pending_.reset();
      return w.status().WithContext("save of step " + std::to_string(step) + ": agreement");
    }
    p.agreement = std::move(w).value();
  }
  return false;
}

void CheckpointWriter::WaitSnapshot() {
  if (pending_ != nullptr) pending_->WaitSnapshot();
}

Status CheckpointWriter::Wait() {
  if (pending_ == nullptr) return Status::Ok();
  return Commit();
}

StatusOr<std::string> SaveAllRanks(const std::string& root,
                                   const std::vector<CheckpointState>& ranks,
                                   const SaveOptions& options) {
  if (ranks.empty()) return InvalidArgument("SaveAllRanks: no rank states");
  const int world = int(ranks.size());
  std::vector<Manifest> plans;
  for (int r = 0; r < world; ++r) {
    const CheckpointState& s = ranks[size_t(r)];
    if (s.rank != r || s.layout.world_size() != world) {
      return InvalidArgument("SaveAllRanks: state ", r, " is rank ", s.rank, " of ",
                             s.layout.world_size(), ", expected rank ", r, " of ", world);
    }
    ASSIGN_OR_RETURN(Manifest plan, PlanForState(s, options.chunk_bytes));
    if (r > 0 && PlanFingerprint(plan) != PlanFingerprint(plans[0])) {
      return InvalidArgument("SaveAllRanks: rank ", r,
                             "'s state differs from rank 0's "
                             "(step, layout, slot names/dtypes or buffers)");
    }
    plans.push_back(std::move(plan));
  }
  Manifest manifest = plans[0];
  const int64_t step = manifest.step;
  ASSIGN_OR_RETURN(std::string tmp, PrepareStepDir(root, step, CommitOpts(options)));
  for (int r = 0; r < world; ++r) {
    StatusOr<FileEntry> f =
        WriteRankFile(JoinPath(tmp, RankFileName(r)), manifest, r, SlotPointers(ranks[size_t(r)]),
                      BufferPointers(ranks[0]), RankOptions(options));
    if (!f.ok()) {
      AbandonStepDir(root, step).IgnoreError();
      return f.status().WithContext("save of step " + std::to_string(step) + ": rank " +
                                    std::to_string(r));
    }
    manifest.files.push_back(std::move(f).value());
  }
  StatusOr<std::string> dir = CommitStepDir(root, manifest, CommitOpts(options));
  if (!dir.ok()) AbandonStepDir(root, step).IgnoreError();
  return dir;
}

}  // namespace shardema
