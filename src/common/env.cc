#include "common/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/crypto.h"
#include "common/strings.h"

namespace pillar {
namespace {

[[nodiscard]] absl::Status Errno(std::string_view what, const std::string& path,
                                 int error = errno) {
  const std::string message = StrCat(what, " ", path, ": ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == ENOSPC || error == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] absl::Status Append(std::span<const std::byte> data) override {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("cannot write", path_);
      }
      data = data.subspan(size_t(n));
    }
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status Sync() override {
    if (::fdatasync(fd_) != 0) return Errno("cannot sync", path_);
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Errno("cannot close", path_);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  int fd_;
};

class PosixMappedFile final : public MappedFile {
 public:
  PosixMappedFile(void* base, size_t size) : base_(base), size_(size) {}
  ~PosixMappedFile() override {
    if (size_ > 0) ::munmap(base_, size_);
  }
  std::span<const std::byte> data() const override {
    return {static_cast<const std::byte*>(base_), size_};
  }

 private:
  void* base_;
  size_t size_;
};

// flock(2) on an open file description: another open of the file, in this process or another,
// does not share it.
class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // closing the description releases the lock

 private:
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  [[nodiscard]] absl::StatusOr<std::unique_ptr<MappedFile>> MapFile(
      const std::string& path) override {
    // O_NONBLOCK: a FIFO left at the name is refused below instead of waited on (review
    // helper-121: `pillar ckpt import --file FIFO` hung).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return Errno("cannot open", path);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int error = errno;
      ::close(fd);
      return Errno("cannot stat", path, error);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(StrCat(path, " is not a file"));
    }
    const size_t size = size_t(st.st_size);
    void* base = nullptr;
    if (size > 0) {
      // MAP_POPULATE reads the file in now, with the kernel's readahead, into pages that are
      // then used in place: loading costs the disk read, not a second copy.
      base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (base == MAP_FAILED) {
        const int error = errno;
        ::close(fd);
        return Errno("cannot map", path, error);
      }
    }
    ::close(fd);
    return std::make_unique<PosixMappedFile>(base, size);
  }
  [[nodiscard]] absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, uint32_t mode) override {
    // unlink removes a link, never its target; O_EXCL then fails on anything that appeared
    // meanwhile instead of opening it.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", path);
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode_t(mode));
    if (fd < 0) return Errno("cannot create", path);
    // The umask must not widen or narrow what the caller asked for (a metrics file others
    // read, a secret they must not).
    if (::fchmod(fd, mode_t(mode)) != 0) {
      const int error = errno;
      ::close(fd);
      return Errno("cannot set the mode of", path, error);
    }
    return std::make_unique<PosixWritableFile>(path, fd);
  }
  [[nodiscard]] absl::Status ReadAt(const std::string& path, uint64_t offset,
                                    std::span<std::byte> out) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open", path);
    absl::Status status;
    while (!out.empty()) {
      const ssize_t n = ::pread(fd, out.data(), out.size(), off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = Errno("cannot read", path);
        break;
      }
      if (n == 0) {
        status = absl::DataLossError(StrCat(path, " ends before byte ", offset + out.size()));
        break;
      }
      out = out.subspan(size_t(n));
      offset += uint64_t(n);
    }
    ::close(fd);
    return status;
  }
  [[nodiscard]] absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Errno("cannot stat", path);
    if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(StrCat(path, " is not a file"));
    return uint64_t(st.st_size);
  }
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return Errno("cannot list", path);
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(dir)) {
      const std::string_view name = e->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(dir);
    return names;
  }
  bool Exists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }
  bool IsLink(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  }
  [[nodiscard]] absl::Status CreateDir(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return absl::InternalError(StrCat("cannot create ", path, ": ", ec.message()));
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status RemoveAll(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return absl::InternalError(StrCat("cannot remove ", path, ": ", ec.message()));
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return Errno(StrCat("cannot rename to ", to), from);
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status SyncDir(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open directory", path);
    const int rc = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    if (rc != 0) return Errno("cannot sync directory", path, error);
    return absl::OkStatus();
  }
  [[nodiscard]] absl::StatusOr<std::unique_ptr<FileLock>> LockFile(
      const std::string& path) override {
    // Read-only is enough for flock, and opens a lock file another user made readable.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                          mode_t(0600));
    if (fd < 0) return Errno("cannot open the lock file", path);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(StrCat(path, " is not a file"));
    }
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      if (error == EWOULDBLOCK) {
        return absl::FailedPreconditionError(StrCat(path, " is held by another process"));
      }
      return Errno("cannot lock", path, error);
    }
    return std::make_unique<PosixFileLock>(fd);
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv;
  return env;
}

[[nodiscard]] absl::StatusOr<std::string> ReadWholeFile(Env& env, const std::string& path,
                                                        uint64_t max_bytes) {
  absl::StatusOr<uint64_t> size = env.FileSize(path);
  if (!size.ok()) return size.status();
  if (*size > max_bytes) {
    return absl::InvalidArgumentError(StrCat(path, " is larger than ", max_bytes, " bytes"));
  }
  std::string text(*size, '\0');
  absl::Status s = env.ReadAt(path, 0, std::as_writable_bytes(std::span(text.data(), text.size())));
  if (!s.ok()) return s;
  return text;
}

[[nodiscard]] absl::Status PublishAtomically(Env& env, const std::string& path,
                                             std::string_view data, uint32_t mode) {
  // A name of its own: two processes publishing the same file at once (two health checks
  // writing one textfile) each write and rename their own temporary file, never the other's
  // half-written one.
  const std::string tmp = StrCat(path, ".tmp.", HexEncode(RandomBytes(8)));
  // A write that fails before its rename (a full disk) leaves nothing behind: repeated failures
  // must not pile up temporary files. (A crash can still leave one; readers pass over them.)
  auto abandon = [&](absl::Status status) {
    (void)env.RemoveAll(tmp);
    return status;
  };
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env.NewWritableFile(tmp, mode);
  if (!file.ok()) return abandon(file.status());
  absl::Status s = (*file)->Append(std::as_bytes(std::span(data.data(), data.size())));
  if (s.ok()) s = (*file)->Sync();
  if (absl::Status closed = (*file)->Close(); s.ok()) s = closed;
  if (s.ok()) s = env.Rename(tmp, path);
  if (!s.ok()) return abandon(s);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return env.SyncDir(dir.empty() ? "." : dir);
}

}  // namespace pillar
