#include "tools/progress.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include "framework/byte_size.h"

namespace shardema::tools {

bool StderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label, uint64_t total, std::ostream* out, bool enabled,
                         bool bytes)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      enabled_(enabled && out != nullptr),
      bytes_(bytes),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

ProgressBar::~ProgressBar() { Finish(); }

std::string ProgressBar::Render(const std::string& label, uint64_t done, uint64_t total, bool bytes,
                                double elapsed_s, int width) {
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.0fs", elapsed_s);
  if (total == 0) return label + "  " + secs;
  done = std::min(done, total);
  const double frac = double(done) / double(total);
  const int filled = int(frac * width);
  std::string line = label + " [" + std::string(size_t(filled), '#') +
                     std::string(size_t(width - filled), '.') + "]";
  char pct[16];
  std::snprintf(pct, sizeof(pct), " %3d%%  ", int(frac * 100.0));
  line += pct;
  line += bytes ? FormatBytes(done) + " / " + FormatBytes(total)
                : std::to_string(done) + " / " + std::to_string(total);
  line += std::string("  ") + secs;
  // ETA at the average rate so far, once there is a rate to extrapolate.
  if (done > 0 && done < total && elapsed_s > 0.0) {
    line += "  ETA " + FormatDuration(elapsed_s * double(total - done) / double(done));
  }
  return line;
}

void ProgressBar::Draw(uint64_t done) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string line = Render(label_, done, total_, bytes_, elapsed);
  last_drawn_ = done;
  // \r, the line, and clear to the end of the terminal line (a shorter line after a longer one).
  *out_ << '\r' << line << "\x1b[K" << std::flush;
}

void ProgressBar::Update(uint64_t done) {
  if (!enabled_ || finished_) return;
  last_done_ = done;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  Draw(done);
}

void ProgressBar::Finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (last_drawn_ != last_done_) Draw(last_done_);
  *out_ << '\n' << std::flush;
}

std::optional<uint64_t> ReadIoCounter(IoCounter which) {
  std::ifstream in("/proc/self/io");
  if (!in) return std::nullopt;
  const std::string key = which == IoCounter::kRead ? "rchar:" : "wchar:";
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return std::nullopt;
}

Status RunWithIoProgress(IoCounter which, ProgressBar* bar, const std::function<Status()>& fn) {
  if (bar == nullptr || !bar->enabled()) return fn();
  const std::optional<uint64_t> start = ReadIoCounter(which);
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread watcher([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      const std::optional<uint64_t> now = ReadIoCounter(which);
      bar->Update(start && now && *now >= *start ? *now - *start : 0);
      cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop; });
    }
  });
  Status st = fn();
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_one();
  watcher.join();
  const std::optional<uint64_t> end = ReadIoCounter(which);
  if (st.ok() && start && end) bar->Update(*end - *start);
  bar->Finish();
  return st;
}

}  // namespace shardema::tools
