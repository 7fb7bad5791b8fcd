#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar {

bool IsResourceShortage(int error) {
  return error == EMFILE || error == ENFILE || error == ENOMEM || error == ENOBUFS;
}

namespace {

// Opens `path` once and checks, reads and closes that descriptor: what is checked is what is
// read, even if the path is swapped meanwhile. O_NONBLOCK: opening a FIFO or a device must not
// block (fstat refuses them right after; a regular file reads as usual).
enum class Guard { kNone, kSecret, kTrusted };

[[nodiscard]] absl::StatusOr<std::string> ReadOpened(const std::filesystem::path& path,
                                                     std::uintmax_t max_bytes, Guard guard) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(StrCat(path.string(), ": no such file"));
    const std::string message = StrCat(path.string(), ": cannot be opened: ", std::strerror(error));
    return IsResourceShortage(error) ? absl::ResourceExhaustedError(message)
                                     : absl::NotFoundError(message);
  }
  const absl::Cleanup close_fd = [fd] { ::close(fd); };
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::NotFoundError(StrCat(path.string(), ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(StrCat(path.string(), ": not a regular file"));
  }
  if (guard == Guard::kSecret && (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        StrCat(path.string(), " is readable by group or others; chmod 600 it (it holds a secret)"));
  }
  if (guard == Guard::kTrusted) {
    if (st.st_uid != ::geteuid() && st.st_uid != 0) {
      return absl::PermissionDeniedError(
          StrCat(path.string(), ": owned by a user other than pillar's or root; chown it"));
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return absl::PermissionDeniedError(
          StrCat(path.string(), ": group or others may write it; chmod go-w it"));
    }
  }
  if (std::uintmax_t(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(StrCat(path.string(), ": larger than ", max_bytes, " bytes"));
  }
  // Read to the end, in chunks: /proc files report a size of 0, and the file may have grown
  // since fstat; stop one chunk past the limit at most.
  std::string text;
  text.reserve(size_t(st.st_size));
  char chunk[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::NotFoundError(StrCat(path.string(), ": ", std::strerror(errno)));
    if (n == 0) break;
    text.append(chunk, size_t(n));
    if (text.size() > max_bytes) {
      return absl::InvalidArgumentError(
          StrCat(path.string(), ": larger than ", max_bytes, " bytes"));
    }
  }
  return text;
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path,
                                                        std::uintmax_t max_bytes) {
  return ReadOpened(path, max_bytes, Guard::kNone);
}

[[nodiscard]] absl::StatusOr<std::string> ReadSecretFile(const std::filesystem::path& path,
                                                         std::uintmax_t max_bytes) {
  return ReadOpened(path, max_bytes, Guard::kSecret);
}

namespace {

// The directories from `path`'s parent up to the root: owned by pillar's user or root, and not
// written by others unless sticky. A directory its group may write is taken: /etc/pillar shared
// with a group of operators is common, and they are the writers of pillar.toml too.
[[nodiscard]] absl::Status CheckDirectories(const std::filesystem::path& path,
                                            const std::filesystem::path& named) {
  std::filesystem::path dir = path.parent_path();
  for (;;) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      return absl::NotFoundError(StrCat(dir.string(), ": ", std::strerror(errno)));
    }
    if (st.st_uid != ::geteuid() && st.st_uid != 0) {
      return absl::PermissionDeniedError(
          StrCat(named.string(), ": its directory ", dir.string(),
                 " is owned by a user other than pillar's or root, who could replace it"));
    }
    if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return absl::PermissionDeniedError(StrCat(named.string(), ": anyone may write its directory ",
                                                dir.string(),
                                                " and could replace it; chmod o-w the directory"));
    }
    if (!dir.has_relative_path()) return absl::OkStatus();  // the root
    dir = dir.parent_path();
  }
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::string> ReadTrustedFile(const std::filesystem::path& path,
                                                          std::uintmax_t max_bytes) {
  std::error_code ec;
  const std::filesystem::path given = std::filesystem::absolute(path, ec).lexically_normal();
  if (!ec) {
    PILLAR_RETURN_IF_ERROR(CheckDirectories(given, path));
    const std::filesystem::path target = std::filesystem::canonical(given, ec);
    if (!ec && target != given) PILLAR_RETURN_IF_ERROR(CheckDirectories(target, path));
  }
  return ReadOpened(path, max_bytes, Guard::kTrusted);
}

FileStamp StampOf(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return FileStamp{
      st.st_dev,  st.st_ino,  int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
      st.st_size, st.st_mode, st.st_uid};
}

}  // namespace pillar
