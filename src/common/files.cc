#include "common/files.h"

#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "common/strings.h"

namespace pillar {

[[nodiscard]] absl::StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path,
                                                        std::uintmax_t max_bytes) {
  std::error_code ec;
  std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(StrCat(path.string(), ": no such file"));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(StrCat(path.string(), ": not a regular file"));
  }
  std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(StrCat(path.string(), ": ", ec.message()));
  if (size > max_bytes) {
    return absl::InvalidArgumentError(StrCat(path.string(), ": larger than ", max_bytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat(path.string(), ": cannot be opened"));
  std::string text;
  text.reserve(size);
  text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  // The file may have grown between the size check and the read.
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(StrCat(path.string(), ": larger than ", max_bytes, " bytes"));
  }
  return text;
}

[[nodiscard]] absl::StatusOr<std::string> ReadSecretFile(const std::filesystem::path& path,
                                                         std::uintmax_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(StrCat("cannot read ", path.string()));
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        StrCat(path.string(), " is readable by group or others; chmod 600 it (it holds a secret)"));
  }
  return ReadSmallFile(path, max_bytes);
}

}  // namespace pillar
