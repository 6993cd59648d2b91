#include "checkpoint/posix_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shardema {

namespace {
Status Errno(const char* op, const std::string& path) {
  return ErrnoToStatus(errno, std::string(op) + " '" + path + "'");
}
}  // namespace

StatusOr<std::unique_ptr<WritableFile>> WritableFile::Create(const std::string& path,
                                                             WriteFaultHook hook) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open for writing", path);
  return std::unique_ptr<WritableFile>(new WritableFile(path, fd, std::move(hook)));
}

WritableFile::~WritableFile() { Close().IgnoreError(); }

StatusOr<std::unique_ptr<WritableFile>> WritableFile::OpenForUpdate(const std::string& path,
                                                                    WriteFaultHook hook) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open for writing", path);
  return std::unique_ptr<WritableFile>(new WritableFile(path, fd, std::move(hook)));
}

namespace {
bool DirectIoEnabled() {
  static const bool on = [] {
    const char* v = std::getenv("SHARDEMA_DIRECT_IO");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}
}  // namespace

WritableFile::WritableFile(std::string path, int fd, WriteFaultHook hook)
    : path_(std::move(path)), fd_(fd), hook_(std::move(hook)) {
  // Best effort: file systems without O_DIRECT refuse the open (EINVAL), and then every write
  // goes through fd_.
  if (DirectIoEnabled()) direct_fd_ = ::open(path_.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
}

Status WritableFile::Append(const void* data, size_t n) { return WriteAt(size_, data, n); }

StatusOr<size_t> WritableFile::WriteOnce(int fd, uint64_t pos, const char* p, size_t n, int* err) {
  const size_t len = std::min<size_t>(n, size_t(1) << 30);
  *err = 0;
  const int injected = hook_ ? hook_(path_, pos, len) : 0;
  ssize_t w = -1;
  while (injected == 0 && *err == 0) {
    w = ::pwrite(fd, p, len, off_t(pos));
    if (w >= 0) break;
    if (errno != EINTR) *err = errno;
  }
  if (injected != 0 || *err != 0) {
    return ErrnoToStatus(injected != 0 ? injected : *err,
                         "write '" + path_ + "' at offset " + std::to_string(pos));
  }
  size_ = std::max(size_, pos + uint64_t(w));
  return size_t(w);
}

Status WritableFile::WriteAll(int fd, uint64_t pos, const char* p, size_t n) {
  int err = 0;
  while (n > 0) {
    ASSIGN_OR_RETURN(const size_t w, WriteOnce(fd, pos, p, n, &err));
    p += w;
    n -= w;
    pos += w;
  }
  return Status::Ok();
}

Status WritableFile::WriteAt(uint64_t offset, const void* data, size_t n) {
  if (fd_ < 0) return FailedPrecondition("write '", path_, "': file is closed");
  const char* p = static_cast<const char*>(data);
  const uint64_t direct = n / kDirectIoAlign * kDirectIoAlign;
  uint64_t done = 0;  // bytes written directly
  if (direct_fd_ >= 0 && direct > 0 && offset % kDirectIoAlign == 0 &&
      reinterpret_cast<uintptr_t>(p) % kDirectIoAlign == 0) {
    // The aligned prefix straight to the device; the buffered path below finishes what a short
    // or unaligned direct write leaves.
    while (done < direct) {
      int err = 0;
      StatusOr<size_t> w = WriteOnce(direct_fd_, offset + done, p + done, direct - done, &err);
      if (!w.ok() && err == EINVAL) {  // the device wants another alignment: buffered from now on
        ::close(direct_fd_);
        direct_fd_ = -1;
        break;
      }
      if (!w.ok()) return w.status();
      done += *w;
      if (*w == 0 || *w % kDirectIoAlign != 0) break;
    }
    direct_bytes_ += done;
  }
  return WriteAll(fd_, offset + done, p + done, n - size_t(done));
}

Status WritableFile::Sync() {
  if (fd_ < 0) return FailedPrecondition("fsync '", path_, "': file is closed");
  if (::fsync(fd_) != 0) return Errno("fsync", path_);
  return Status::Ok();
}

Status WritableFile::Close() {
  if (direct_fd_ >= 0) {
    ::close(direct_fd_);  // its writes are on the device already: nothing to report
    direct_fd_ = -1;
  }
  if (fd_ < 0) return Status::Ok();
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Errno("close", path_);
  return Status::Ok();
}

StatusOr<std::unique_ptr<ReadableFile>> ReadableFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = Errno("stat", path);
    ::close(fd);
    return s;
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("open '", path, "': is a directory, expected a file");
  }
  return std::unique_ptr<ReadableFile>(new ReadableFile(path, fd, uint64_t(st.st_size)));
}

ReadableFile::~ReadableFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status ReadableFile::ReadAt(uint64_t offset, size_t n, void* dst) const {
  char* p = static_cast<char*>(dst);
  uint64_t pos = offset;
  size_t left = n;
  while (left > 0) {
    ssize_t r = ::pread(fd_, p, std::min<size_t>(left, size_t(1) << 30), off_t(pos));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "read '" + path_ + "' at offset " + std::to_string(pos));
    }
    if (r == 0) {
      return OutOfRange("read '", path_, "': bytes [", offset, ", ", offset + n,
                        ") requested but the file ends at ", pos, " (truncated?)");
    }
    p += r;
    pos += uint64_t(r);
    left -= size_t(r);
  }
  return Status::Ok();
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty() || (!b.empty() && b[0] == '/')) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

namespace {
std::string StripTrailingSlashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}
}  // namespace

std::string BaseName(const std::string& path) {
  std::string p = StripTrailingSlashes(path);
  size_t k = p.rfind('/');
  return k == std::string::npos ? p : p.substr(k + 1);
}

std::string DirName(const std::string& path) {
  std::string p = StripTrailingSlashes(path);
  size_t k = p.rfind('/');
  if (k == std::string::npos) return ".";
  if (k == 0) return "/";
  return p.substr(0, k);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

StatusOr<std::string> CanonicalPath(const std::string& path) {
  std::string head = path.empty() ? "." : path;
  std::string tail;
  for (;;) {
    char buf[PATH_MAX];
    if (::realpath(head.c_str(), buf) != nullptr)
      return tail.empty() ? std::string(buf) : JoinPath(buf, tail);
    if (errno != ENOENT) return ErrnoToStatus(errno, "realpath of '" + head + "'");
    const std::string base = BaseName(head);
    const std::string parent = DirName(head);
    if (base.empty() || base == "." || base == ".." || parent == head) {
      return ErrnoToStatus(ENOENT, "realpath of '" + path + "'");
    }
    tail = tail.empty() ? base : JoinPath(base, tail);
    head = parent;
  }
}

bool PathsOverlap(const std::string& a, const std::string& b) {
  auto inside = [](const std::string& x, const std::string& dir) {
    if (x == dir) return true;
    const std::string prefix = dir.size() > 1 && dir.back() == '/' ? dir : dir + "/";
    return dir == "/" || x.compare(0, prefix.size(), prefix) == 0;
  };
  return inside(a, b) || inside(b, a);
}

Status MakeDirs(const std::string& path) {
  if (path.empty() || IsDirectory(path)) return Status::Ok();
  std::string parent = DirName(path);
  if (parent != path) RETURN_IF_ERROR(MakeDirs(parent));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir", path);
  if (!IsDirectory(path))
    return FailedPrecondition("mkdir '", path, "': exists and is not a directory");
  return Status::Ok();
}

Status SyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open directory", path);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return ErrnoToStatus(err, "fsync directory '" + path + "'");
  return Status::Ok();
}

Status RenamePath(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename '" + from + "' to '" + to + "'");
  }
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Errno("stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(path));
    for (const std::string& n : names) RETURN_IF_ERROR(RemoveTree(JoinPath(path, n)));
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return Errno("rmdir", path);
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Errno("unlink", path);
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return Errno("list directory", path);
  std::vector<std::string> out;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, ReadableFile::Open(path));
  if (f->size() > max_bytes) {
    return ResourceExhausted("read '", path, "': ", f->size(), " bytes, more than the ", max_bytes,
                             " bytes allowed");
  }
  std::string s(size_t(f->size()), '\0');
  RETURN_IF_ERROR(f->ReadAt(0, s.size(), s.data()));
  return s;
}

Status WriteFileAtomic(const std::string& path, const std::string& contents, bool do_fsync,
                       const WriteFaultHook& hook) {
  const std::string tmp = path + ".tmp";
  {
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, WritableFile::Create(tmp, hook));
    Status s = f->Append(contents.data(), contents.size());
    if (s.ok() && do_fsync) s = f->Sync();
    if (s.ok()) s = f->Close();
    if (!s.ok()) {
      f.reset();
      ::unlink(tmp.c_str());
      return s;
    }
  }
  RETURN_IF_ERROR(RenamePath(tmp, path));
  if (do_fsync) RETURN_IF_ERROR(SyncDir(DirName(path)));
  return Status::Ok();
}

}  // namespace shardema
