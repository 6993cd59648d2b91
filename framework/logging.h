// Rank-prefixed logging to stderr: "[rank 2/4] I 12:03:04.123 store.cc:88] message".
//
// The rank prefix comes from SetLogRank (the MPI communicator sets it at start-up). Levels below
// the threshold (SHARDEMA_LOG_LEVEL = debug|info|warning|error, default info) are dropped.
// Threading: each message is written with one write(2), so lines from threads do not interleave.
#ifndef SHARDEMA_FRAMEWORK_LOGGING_H_
#define SHARDEMA_FRAMEWORK_LOGGING_H_

#include <sstream>
#include <string>

namespace shardema {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogRank(int rank, int world_size);
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Formats the prefix for (level, file, line) and writes prefix + message + '\n'.
void LogMessage(LogLevel level, const char* file, int line, const std::string& message);
// The prefix alone, exposed for tests.
std::string LogPrefix(LogLevel level, const char* file, int line);

namespace logging_internal {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line) : level_(level), file_(file), line_(line) {}
  ~LogLine() { LogMessage(level_, file_, line_, os_.str()); }
  std::ostream& stream() { return os_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream os_;
};
// Turns `stream << ...` into void; binds less tightly than << and more tightly than ?:.
struct Voidify {
  void operator&(std::ostream&) {}
};
}  // namespace logging_internal
}  // namespace shardema

// `!enabled ? (void)0 : Voidify() & stream << ...`: one expression, so LOG_* is safe as the
// body of an unbraced if/else (no dangling else), and nothing after the macro is evaluated when
// the level is off.
#define SHARDEMA_LOG(level)                                                                        \
  !(::shardema::LogLevel::level >= ::shardema::GetLogLevel())                                      \
      ? (void)0                                                                                    \
      : ::shardema::logging_internal::Voidify() &                                                  \
            ::shardema::logging_internal::LogLine(::shardema::LogLevel::level, __FILE__, __LINE__) \
                .stream()

#define LOG_DEBUG SHARDEMA_LOG(kDebug)
#define LOG_INFO SHARDEMA_LOG(kInfo)
#define LOG_WARNING SHARDEMA_LOG(kWarning)
#define LOG_ERROR SHARDEMA_LOG(kError)

#endif  // SHARDEMA_FRAMEWORK_LOGGING_H_
