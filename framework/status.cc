#include "framework/status.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shardema {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kUnimplemented: return "unimplemented";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) rep_ = std::make_shared<Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string* const kEmpty = new std::string();
  return rep_ ? rep_->message : *kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code())) + ": " + message();
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code(), context + ": " + message());
}

std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

Status ErrnoToStatus(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR: return Status(StatusCode::kNotFound, msg);
    case ENOSPC:
    case ENOMEM:
    case EDQUOT:
    case EFBIG: return Status(StatusCode::kResourceExhausted, msg);
    case EACCES:
    case EPERM:
    case EROFS: return Status(StatusCode::kFailedPrecondition, msg);
    case EEXIST: return Status(StatusCode::kAlreadyExists, msg);
    case EINVAL: return Status(StatusCode::kInvalidArgument, msg);
    default: return Status(StatusCode::kInternal, msg);
  }
}

namespace status_internal {
void DieOnErrorAccess(const Status& s) {
  std::fprintf(stderr, "StatusOr::value() on an error: %s\n", s.ToString().c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace status_internal

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument: return 2;
    case StatusCode::kNotFound: return 3;
    case StatusCode::kDataLoss: return 4;
    default: return 1;
  }
}

}  // namespace shardema
