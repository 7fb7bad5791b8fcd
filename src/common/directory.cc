#include "common/directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/files.h"
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

absl::StatusOr<std::vector<std::string>> Directory::ListFiles(size_t max_files) const {
  std::vector<std::string> files;
  // Directories still to list: a descriptor and the relative prefix of their entries.
  std::vector<std::pair<int, std::string>> pending;
  const int first = ::openat(fd_, ".", kOpenDirFlags);
  if (first < 0) return OpenError(path_, errno);
  pending.emplace_back(first, "");
  absl::Status failure;
  while (!pending.empty() && failure.ok()) {
    auto [fd, prefix] = std::move(pending.back());
    pending.pop_back();
    DIR* dir = ::fdopendir(fd);  // owns fd from here
    if (dir == nullptr) {
      ::close(fd);
      failure = OpenError(StrCat(path_, "/", prefix), errno);
      break;
    }
    while (failure.ok()) {
      errno = 0;
      const dirent* entry = ::readdir(dir);
      if (entry == nullptr) {
        if (errno != 0) failure = OpenError(StrCat(path_, "/", prefix), errno);
        break;
      }
      const std::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      const std::string relative = StrCat(prefix, name);
      struct stat st {};
      if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        failure = OpenError(StrCat(path_, "/", relative), errno);
      } else if (S_ISLNK(st.st_mode)) {
        failure = absl::InvalidArgumentError(
            StrCat(path_, ": ", relative, " is a symbolic link; sign and serve real files only"));
      } else if (S_ISDIR(st.st_mode)) {
        if (std::count(relative.begin(), relative.end(), '/') + 1 >= long(kMaxDepth)) {
          failure = absl::InvalidArgumentError(
              StrCat(path_, ": directories nest deeper than ", kMaxDepth, " levels"));
          break;
        }
        const int sub = ::openat(::dirfd(dir), entry->d_name, kOpenDirFlags);
        if (sub < 0) {
          failure = OpenError(StrCat(path_, "/", relative), errno);
        } else {
          pending.emplace_back(sub, StrCat(relative, "/"));
        }
      } else if (!S_ISREG(st.st_mode)) {
        failure =
            absl::InvalidArgumentError(StrCat(path_, ": ", relative, " is not a regular file"));
      } else if (files.size() >= max_files) {
        failure = absl::InvalidArgumentError(StrCat(path_, ": more than ", max_files, " files"));
      } else {
        files.push_back(relative);
      }
    }
    ::closedir(dir);
  }
  for (auto& [fd, prefix] : pending) ::close(fd);
  if (!failure.ok()) return failure;
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace pillar
