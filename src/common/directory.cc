#include "common/directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar {
namespace {

constexpr int kOpenDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
// Deeper trees are refused: nothing pillar reads nests this far, and the walk stays bounded.
constexpr size_t kMaxDepth = 32;

[[nodiscard]] absl::Status OpenError(std::string_view what, int error) {
  if (error == ENOENT) return absl::NotFoundError(StrCat(what, ": no such file"));
  if (error == ELOOP) {
    return absl::InvalidArgumentError(StrCat(what, " is a symbolic link; links are not followed"));
  }
  if (error == ENOTDIR) return absl::InvalidArgumentError(StrCat(what, ": not a directory"));
  if (IsResourceShortage(error)) {
    return absl::ResourceExhaustedError(StrCat("cannot open ", what, ": ", std::strerror(error)));
  }
  return absl::PermissionDeniedError(StrCat("cannot open ", what, ": ", std::strerror(error)));
}

void CloseFd(int fd) {
  if (fd >= 0) ::close(fd);
}

}  // namespace

bool IsPlainRelativePath(std::string_view relative) {
  if (relative.empty() || relative.front() == '/' || relative.back() == '/') return false;
  if (relative.find('\0') != std::string_view::npos) return false;
  for (std::string_view part : Split(relative, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

File::~File() { CloseFd(fd_); }

absl::StatusOr<size_t> File::Read(char* out, size_t n) {
  for (;;) {
    const ssize_t got = ::read(fd_, out, n);
    if (got >= 0) return size_t(got);
    if (errno != EINTR) {
      return absl::DataLossError(StrCat("cannot read ", name_, ": ", std::strerror(errno)));
    }
  }
}

Directory::~Directory() { CloseFd(fd_); }

[[nodiscard]] absl::StatusOr<std::string> ReadFileBeneath(const Directory& dir,
                                                          std::string_view relative,
                                                          uint64_t max_bytes) {
  absl::StatusOr<File> file = dir.OpenFile(relative);
  if (!file.ok()) return file.status();
  const auto too_large = [&] {
    return absl::InvalidArgumentError(
        StrCat(dir.path(), "/", relative, ": larger than ", max_bytes, " bytes"));
  };
  if (file->size() > max_bytes) return too_large();
  std::string text(file->size() + 1, '\0');  // one more: a file that grew is seen to
  size_t size = 0;
  for (;;) {
    if (size == text.size()) {
      if (size > max_bytes) return too_large();
      text.resize(std::min<uint64_t>(max_bytes + 1, text.size() * 2));
    }
    absl::StatusOr<size_t> n = file->Read(text.data() + size, text.size() - size);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    size += *n;
  }
  if (size > max_bytes) return too_large();
  text.resize(size);
  return text;
}

absl::StatusOr<Directory> Directory::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), kOpenDirFlags);
  if (fd < 0) return OpenError(path, errno);
  return Directory(fd, path);
}

absl::StatusOr<File> Directory::OpenFile(std::string_view relative) const {
  const std::string shown = StrCat(path_, "/", relative);
  if (!IsPlainRelativePath(relative)) {
    return absl::InvalidArgumentError(StrCat(shown, ": not a plain relative path"));
  }
  std::vector<std::string_view> parts = Split(relative, '/');
  int at = fd_;
  int owned = -1;  // the descriptor of an intermediate directory, when one is open
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const int next = ::openat(at, std::string(parts[i]).c_str(), kOpenDirFlags);
    const int error = errno;
    CloseFd(owned);
    if (next < 0) return OpenError(shown, error);
    at = owned = next;
  }
  const int fd = ::openat(at, std::string(parts.back()).c_str(),
                          O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  const int error = errno;
  CloseFd(owned);
  if (fd < 0) return OpenError(shown, error);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(StrCat(shown, ": not a regular file"));
  }
  // O_NONBLOCK only kept open() from waiting on a FIFO; regular files ignore it.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return File(fd, uint64_t(st.st_size), shown);
}

namespace {

// Lists the directory open at `fd` (closed here) into `files`, depth first: a subdirectory is
// listed as soon as it is met, while its parent stays open, so the walk holds at most one
// descriptor per level (kMaxDepth). Opening every sibling before descending, as it once did, held
// one per subdirectory: a store writer who added thousands of empty ones ran the process out of
// descriptors, and the check that walked them took the shortage for "cannot check now" (review
// helper-56). Directories count toward `max_entries` with the files.
[[nodiscard]] absl::Status ListInto(int fd, const std::string& shown, const std::string& prefix,
                                    size_t max_entries, size_t& entries,
                                    std::vector<std::string>& files) {
  DIR* dir = ::fdopendir(fd);  // owns fd from here
  if (dir == nullptr) {
    const int error = errno;
    ::close(fd);
    return OpenError(StrCat(shown, "/", prefix), error);
  }
  const absl::Cleanup close_dir = [dir] { ::closedir(dir); };
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) {
      if (errno != 0) return OpenError(StrCat(shown, "/", prefix), errno);
      return absl::OkStatus();
    }
    const std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string relative = StrCat(prefix, name);
    if (++entries > max_entries) {
      return absl::InvalidArgumentError(
          StrCat(shown, ": more than ", max_entries, " files and directories"));
    }
    struct stat st {};
    if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return OpenError(StrCat(shown, "/", relative), errno);
    }
    if (S_ISLNK(st.st_mode)) {
      return absl::InvalidArgumentError(
          StrCat(shown, ": ", relative, " is a symbolic link; sign and serve real files only"));
    }
    if (S_ISDIR(st.st_mode)) {
      if (std::count(relative.begin(), relative.end(), '/') + 1 >= long(kMaxDepth)) {
        return absl::InvalidArgumentError(
            StrCat(shown, ": directories nest deeper than ", kMaxDepth, " levels"));
      }
      const int sub = ::openat(::dirfd(dir), entry->d_name, kOpenDirFlags);
      if (sub < 0) return OpenError(StrCat(shown, "/", relative), errno);
      PILLAR_RETURN_IF_ERROR(
          ListInto(sub, shown, StrCat(relative, "/"), max_entries, entries, files));
    } else if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(StrCat(shown, ": ", relative, " is not a regular file"));
    } else {
      files.push_back(relative);
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> Directory::ListFiles(size_t max_files) const {
  const int first = ::openat(fd_, ".", kOpenDirFlags);
  if (first < 0) return OpenError(path_, errno);
  std::vector<std::string> files;
  size_t entries = 0;
  PILLAR_RETURN_IF_ERROR(ListInto(first, path_, "", max_files, entries, files));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace pillar
