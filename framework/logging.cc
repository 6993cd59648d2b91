#include "framework/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace shardema {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_world{0};

LogLevel InitialLevel() {
  const char* e = std::getenv("SHARDEMA_LOG_LEVEL");
  if (e == nullptr) return LogLevel::kInfo;
  if (!std::strcmp(e, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(e, "warning")) return LogLevel::kWarning;
  if (!std::strcmp(e, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}
std::atomic<int> g_level{static_cast<int>(InitialLevel())};
}  // namespace

void SetLogRank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

std::string LogPrefix(LogLevel level, const char* file, int line) {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = int(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  localtime_r(&t, &tm);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  char buf[256];
  if (g_rank >= 0) {
    std::snprintf(buf, sizeof buf, "[rank %d/%d] %c %02d:%02d:%02d.%03d %s:%d] ", g_rank.load(),
                  g_world.load(), kLetters[int(level)], tm.tm_hour, tm.tm_min, tm.tm_sec, ms, base,
                  line);
  } else {
    std::snprintf(buf, sizeof buf, "%c %02d:%02d:%02d.%03d %s:%d] ", kLetters[int(level)],
                  tm.tm_hour, tm.tm_min, tm.tm_sec, ms, base, line);
  }
  return buf;
}

void LogMessage(LogLevel level, const char* file, int line, const std::string& message) {
  if (level < GetLogLevel()) return;
  std::string out = LogPrefix(level, file, line) + message + "\n";
  ssize_t r = ::write(STDERR_FILENO, out.data(), out.size());
  (void)r;
}

}  // namespace shardema
