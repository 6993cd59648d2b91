// shardema's one error model: Status and StatusOr<T>, with return macros.
//
// Every fallible call in the code base returns a Status (or StatusOr<T>). Foreign error codes
// (MPI, NCCL, CUDA, errno) are converted once, at the edge, by the helpers declared next to the
// backend that meets them (e.g. framework/mpi/mpi_error.h). Messages carry the values: the file,
// the rank, the tensor, what was expected and what was found. Only `main` turns an error into an
// exit code (see ExitCodeFor).
//
// Threading: Status and StatusOr are plain values; distinct objects may be used from any thread.
#ifndef SHARDEMA_FRAMEWORK_STATUS_H_
#define SHARDEMA_FRAMEWORK_STATUS_H_

#include <cassert>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>

namespace shardema {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed something wrong (shape, flag, dtype, null buffer)
  kNotFound = 2,            // a file, slot, tensor or checkpoint that should exist does not
  kAlreadyExists = 3,       // refusing to overwrite
  kFailedPrecondition = 4,  // the object is in the wrong state (e.g. a call after shutdown)
  kOutOfRange = 5,          // an index or offset past the end (e.g. a truncated file)
  kDataLoss = 6,            // corrupt data: checksum mismatch, bad magic, inconsistent manifest
  kResourceExhausted = 7,   // out of memory or disk space
  kUnavailable = 8,         // a device or backend that is not present (e.g. no GPU)
  kInternal = 9,            // a backend (MPI, NCCL, CUDA) reported an error
  kAborted = 10,            // the operation was cancelled or a peer failed
  kUnimplemented = 11,      // the combination is not supported by this build
};

// Stable lower-case name of a code ("invalid_argument"), used in messages and logs.
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  const std::string& message() const;

  // "invalid_argument: <message>", or "ok".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(const std::string& context) const;

  // Explicitly discards a status (documents that ignoring it is deliberate).
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }
  friend bool operator!=(const Status& a, const Status& b) { return !(a == b); }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null means OK; shared so copies are cheap
};

std::ostream& operator<<(std::ostream& os, const Status& s);

// Builds a message from stream-able parts: Err(kInvalidArgument, "rank ", r, " expected ", n).
template <typename... Args>
Status Err(StatusCode code, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return Status(code, os.str());
}
template <typename... Args>
Status InvalidArgument(const Args&... a) {
  return Err(StatusCode::kInvalidArgument, a...);
}
template <typename... Args>
Status NotFound(const Args&... a) {
  return Err(StatusCode::kNotFound, a...);
}
template <typename... Args>
Status FailedPrecondition(const Args&... a) {
  return Err(StatusCode::kFailedPrecondition, a...);
}
template <typename... Args>
Status OutOfRange(const Args&... a) {
  return Err(StatusCode::kOutOfRange, a...);
}
template <typename... Args>
Status DataLoss(const Args&... a) {
  return Err(StatusCode::kDataLoss, a...);
}
template <typename... Args>
Status Internal(const Args&... a) {
  return Err(StatusCode::kInternal, a...);
}
template <typename... Args>
Status Unavailable(const Args&... a) {
  return Err(StatusCode::kUnavailable, a...);
}
template <typename... Args>
Status Unimplemented(const Args&... a) {
  return Err(StatusCode::kUnimplemented, a...);
}
template <typename... Args>
Status AlreadyExists(const Args&... a) {
  return Err(StatusCode::kAlreadyExists, a...);
}
template <typename... Args>
Status ResourceExhausted(const Args&... a) {
  return Err(StatusCode::kResourceExhausted, a...);
}
template <typename... Args>
Status Aborted(const Args&... a) {
  return Err(StatusCode::kAborted, a...);
}

// Converts an errno value into a Status naming the operation and path:
// "open '/ckpt/x.bin': No such file or directory" with code kNotFound / kResourceExhausted
// (ENOSPC, ENOMEM) / kFailedPrecondition (EACCES, EROFS) / kInternal otherwise.
Status ErrnoToStatus(int err, const std::string& what);

// Process exit code for a status, documented for CLIs: 0 ok, 2 invalid argument,
// 3 not found, 4 data loss, 1 anything else.
int ExitCodeFor(const Status& s);

namespace status_internal {
// Prints "StatusOr::value() on an error: <status>" to stderr and aborts. In every build mode:
// reading the value of an error is a programming error, never garbage.
[[noreturn]] void DieOnErrorAccess(const Status& s);
}  // namespace status_internal

// A value or an error. value(), operator* and operator-> of an error print the status and abort
// the process in every build mode (check ok() first, or use the macros below).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& s) : status_(s) {  // NOLINT: implicit by design
    assert(!s.ok() && "StatusOr built from an OK Status without a value");
    if (status_.ok())
      status_ = Status(StatusCode::kInternal, "StatusOr built from OK without value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    CheckHasValue();
    return *value_;
  }
  const T& value() const& {
    CheckHasValue();
    return *value_;
  }
  T&& value() && {
    CheckHasValue();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void CheckHasValue() const {
    if (!ok()) status_internal::DieOnErrorAccess(status_);
  }

  Status status_;
  std::optional<T> value_;
};

namespace status_internal {
inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
const Status& GetStatus(const StatusOr<T>& s) {
  return s.status();
}
}  // namespace status_internal

}  // namespace shardema

#define SHARDEMA_CONCAT_INNER_(a, b) a##b
#define SHARDEMA_CONCAT_(a, b) SHARDEMA_CONCAT_INNER_(a, b)

// Returns the status of `expr` from the enclosing function if it is not OK.
#define RETURN_IF_ERROR(expr)                                                             \
  do {                                                                                    \
    const ::shardema::Status _shardema_st = ::shardema::status_internal::GetStatus(expr); \
    if (!_shardema_st.ok()) return _shardema_st;                                          \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  SHARDEMA_ASSIGN_OR_RETURN_IMPL_(SHARDEMA_CONCAT_(_shardema_or_, __LINE__), lhs, expr)
#define SHARDEMA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()

#endif  // SHARDEMA_FRAMEWORK_STATUS_H_
