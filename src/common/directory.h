// A directory held open by descriptor, and the files beneath it opened relative to it, never
// following a symbolic link: what a caller checks and then uses is one file, whatever others
// rename, swap or link in the tree meanwhile (a model version being verified and loaded).
//
//   PILLAR_ASSIGN_OR_RETURN(Directory dir, Directory::Open("store/digits/3"));
//   PILLAR_ASSIGN_OR_RETURN(std::vector<std::string> files, dir.ListFiles(100'000));
//   PILLAR_ASSIGN_OR_RETURN(File f, dir.OpenFile("model.pt"));   // f.size() from fstat
// A Directory owns its descriptor; it may be used from one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pillar {

// A regular file opened read-only; closed when destroyed.
class File {
 public:
  File(File&& other) noexcept : fd_(other.fd_), size_(other.size_), name_(std::move(other.name_)) {
    other.fd_ = -1;
  }
  File& operator=(File&&) = delete;
  File(const File&) = delete;
  ~File();

  int fd() const { return fd_; }
  // The size fstat reported when the file was opened.
  uint64_t size() const { return size_; }

  // Reads up to `n` bytes at the current position; 0 at the end. An error names the file.
  [[nodiscard]] absl::StatusOr<size_t> Read(char* out, size_t n);

 private:
  friend class Directory;
  File(int fd, uint64_t size, std::string name) : fd_(fd), size_(size), name_(std::move(name)) {}
  int fd_;
  uint64_t size_;
  std::string name_;  // for messages
};

class Directory {
 public:
  // Opens `path` as a directory; its last component must not be a symbolic link.
  [[nodiscard]] static absl::StatusOr<Directory> Open(const std::string& path);
  Directory(Directory&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
    other.fd_ = -1;
  }
  Directory& operator=(Directory&&) = delete;
  Directory(const Directory&) = delete;
  ~Directory();

  const std::string& path() const { return path_; }

  // Opens the regular file at `relative` ('/'-separated, no "." or ".." components), every
  // component opened without following links. NotFound when absent; InvalidArgument for a
  // link, a directory or anything else that is not a regular file.
  [[nodiscard]] absl::StatusOr<File> OpenFile(std::string_view relative) const;

  // Every regular file beneath, as sorted relative '/'-separated paths. A symbolic link or any
  // other kind of file is an error naming it; more than `max_files` files and directories is an
  // error. Holds at most one descriptor per level of nesting.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> ListFiles(size_t max_files) const;

 private:
  Directory(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// The whole of the regular file at `relative` beneath `dir`, read through one descriptor;
// InvalidArgument when it is larger than `max_bytes`.
[[nodiscard]] absl::StatusOr<std::string> ReadFileBeneath(const Directory& dir,
                                                          std::string_view relative,
                                                          uint64_t max_bytes);

// Whether `relative` is a path OpenFile accepts: non-empty components, none "." or "..", no
// leading '/', no NUL.
bool IsPlainRelativePath(std::string_view relative);

}  // namespace pillar
