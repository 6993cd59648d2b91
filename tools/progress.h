// A progress bar on a terminal for the long operations of the ckpt tool (export, reshard, verify,
// diff), and a way to drive it for library calls that report no progress of their own.
//
//   ProgressBar bar("verify", total_bytes, &std::cerr, StderrIsTerminal());
//   bar.Update(done);  ...  bar.Finish();
//
// A disabled bar (stderr is not a terminal, e.g. in scripts and logs) prints nothing, so output
// that is piped or captured stays clean.
//
// RunWithIoProgress runs a blocking call (e.g. VerifyCheckpoint) while a watcher thread samples
// this process's I/O counters (/proc/self/io: bytes passed to read(2)/write(2) by every thread)
// and shows the bytes moved since the start against the expected total. Where /proc/self/io is
// not readable the bar shows the elapsed time only.
//
// Threading: a ProgressBar is used by one thread at a time (RunWithIoProgress hands it to its
// watcher thread for the duration of the call).
#ifndef SHARDEMA_TOOLS_PROGRESS_H_
#define SHARDEMA_TOOLS_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "framework/duration.h"
#include "framework/status.h"

namespace shardema::tools {

// isatty(STDERR_FILENO).
bool StderrIsTerminal();

class ProgressBar {
 public:
  // `total` is in bytes when `bytes` is true (shown as "1.2 GiB / 4.0 GiB"), else in items.
  ProgressBar(std::string label, uint64_t total, std::ostream* out, bool enabled,
              bool bytes = true);
  ~ProgressBar();  // Finish() if not done
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool enabled() const { return enabled_; }
  // Redraws the line (\r, no newline) at most every 100 ms; `done` is clamped to the total.
  void Update(uint64_t done);
  // Draws the final state and ends the line. Idempotent.
  void Finish();

  // The text of one bar line, e.g.
  // "verify [#########...........]  45%  1.80 GiB / 4.00 GiB  3s  ETA 4s": elapsed time, then the
  // time left at the average rate so far (elapsed * (total - done) / done; shown while
  // 0 < done < total). `done` > total is shown as total; total == 0 shows the elapsed time only.
  static std::string Render(const std::string& label, uint64_t done, uint64_t total, bool bytes,
                            double elapsed_s, int width = 30);

 private:
  void Draw(uint64_t done);

  std::string label_;
  uint64_t total_;
  std::ostream* out_;
  bool enabled_;
  bool bytes_;
  bool finished_ = false;
  uint64_t last_done_ = 0;
  uint64_t last_drawn_ = UINT64_MAX;  // `done` of the last line drawn
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

enum class IoCounter { kRead, kWrite };

// This process's rchar / wchar from /proc/self/io; nullopt when unavailable.
std::optional<uint64_t> ReadIoCounter(IoCounter which);

// Runs fn() on the calling thread; while it runs and `bar` is enabled, a watcher thread updates
// the bar every 100 ms with the growth of `which` since the start. Finishes the bar. Returns fn's
// status.
Status RunWithIoProgress(IoCounter which, ProgressBar* bar, const std::function<Status()>& fn);

}  // namespace shardema::tools

#endif  // SHARDEMA_TOOLS_PROGRESS_H_
