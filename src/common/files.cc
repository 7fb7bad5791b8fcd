#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

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
  if (guard == Guard::kTrusted || guard == Guard::kSecret) {
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

namespace {

// A directory whose entries decide which file a trusted path names: owned by pillar's user or
// root, and not written by others unless sticky. A directory its group may write is taken:
// /etc/pillar shared with a group of operators is common, and they write pillar.toml too.
[[nodiscard]] absl::Status CheckDirectory(const std::filesystem::path& dir,
                                          const std::filesystem::path& named) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(
        StrCat(named.string(), ": ", dir.string(), ": ", std::strerror(errno)));
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return absl::PermissionDeniedError(
        StrCat(named.string(), ": the directory ", dir.string(),
               " is owned by a user other than pillar's or root, who could replace it"));
  }
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return absl::PermissionDeniedError(StrCat(named.string(), ": anyone may write the directory ",
                                              dir.string(),
                                              " and could replace it; chmod o-w the directory"));
  }
  return absl::OkStatus();
}

// Resolves `path` one component at a time, as the kernel does, following each symlink (at most
// 40) and each "..", and checks every directory it goes through: the file it names is decided
// by those directories' entries alone. Returns the path with no symlink left, which is what is
// then opened, so that what was checked is what is read. Checking the path as given and its
// canonical form missed a symlink's hop through a directory anyone may write, and a ".." after
// a symlink (found by review helper-65).
[[nodiscard]] absl::StatusOr<std::filesystem::path> ResolveTrusted(
    const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return absl::NotFoundError(StrCat(path.string(), ": ", ec.message()));
  std::vector<std::string> rest;  // components still to walk, the next one last
  for (const auto& part : absolute.relative_path()) rest.insert(rest.begin(), part.string());
  std::filesystem::path at = "/";
  PILLAR_RETURN_IF_ERROR(CheckDirectory(at, path));
  int links = 0;
  while (!rest.empty()) {
    const std::string part = std::move(rest.back());
    rest.pop_back();
    if (part.empty() || part == ".") continue;
    if (part == "..") {  // `at` has no symlink in it: its parent is where ".." leads
      at = at.parent_path();
      continue;
    }
    const std::filesystem::path next = at / part;
    struct stat st {};
    if (::lstat(next.c_str(), &st) != 0) {
      if (errno == ENOENT) return absl::NotFoundError(StrCat(path.string(), ": no such file"));
      return absl::NotFoundError(
          StrCat(path.string(), ": ", next.string(), ": ", std::strerror(errno)));
    }
    if (S_ISLNK(st.st_mode)) {
      // Whoever owns a symlink can point it elsewhere, in /tmp too (found by review helper-66):
      // it must be pillar's user's or root's, as a trusted file must.
      if (st.st_uid != ::geteuid() && st.st_uid != 0) {
        return absl::PermissionDeniedError(
            StrCat(path.string(), ": the symlink ", next.string(),
                   " is owned by a user other than pillar's or root, who could repoint it"));
      }
      if (++links > 40) {
        return absl::InvalidArgumentError(StrCat(path.string(), ": too many symlinks"));
      }
      const std::filesystem::path target = std::filesystem::read_symlink(next, ec);
      if (ec) return absl::NotFoundError(StrCat(path.string(), ": ", ec.message()));
      std::vector<std::string> parts;
      for (const auto& piece : target.relative_path()) parts.push_back(piece.string());
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) rest.push_back(*it);
      if (target.is_absolute()) {
        at = "/";
      }
      continue;
    }
    at = next;
    if (rest.empty()) break;
    if (!S_ISDIR(st.st_mode)) {  // "file/", "file/..": the kernel refuses them too
      return absl::NotFoundError(StrCat(path.string(), ": ", at.string(), " is not a directory"));
    }
    PILLAR_RETURN_IF_ERROR(CheckDirectory(at, path));
  }
  return at;
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::string> ReadTrustedFile(const std::filesystem::path& path,
                                                          std::uintmax_t max_bytes) {
  PILLAR_ASSIGN_OR_RETURN(const std::filesystem::path resolved, ResolveTrusted(path));
  return ReadOpened(resolved, max_bytes, Guard::kTrusted);
}

// A secret is trusted as well: whoever could replace a TLS key or a signing key (its owner, a
// writer of its directory) could hold every reload hostage or sign in pillar's name (found by
// review helper-65 for the TLS key).
[[nodiscard]] absl::StatusOr<std::string> ReadSecretFile(const std::filesystem::path& path,
                                                         std::uintmax_t max_bytes) {
  PILLAR_ASSIGN_OR_RETURN(const std::filesystem::path resolved, ResolveTrusted(path));
  return ReadOpened(resolved, max_bytes, Guard::kSecret);
}

FileStamp StampOf(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return FileStamp{
      st.st_dev,  st.st_ino,  int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
      st.st_size, st.st_mode, st.st_uid};
}

}  // namespace pillar
