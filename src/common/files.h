// Reading small files that people or tools write (configuration, model.toml): a regular file
// no larger than a cap, so pointing pillar at /dev/zero or a huge file gets an error, not a
// hang or an out-of-memory.
//
//   PILLAR_ASSIGN_OR_RETURN(std::string text, ReadSmallFile("pillar.toml", 1 << 20));
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pillar {

// An errno that says the process or the system ran short (descriptors, memory), not that a file
// is missing or wrong. The readers below report it as ResourceExhausted, so that whoever checks
// files on a schedule (the model store's scan, the signature checks) tries again later instead
// of concluding that the files changed.
[[nodiscard]] bool IsResourceShortage(int error);

// NotFound when the file is missing or unreadable; ResourceExhausted on a shortage (above);
// InvalidArgument when it is not a regular file or is larger than `max_bytes`. Messages name the
// path.
[[nodiscard]] absl::StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path,
                                                        std::uintmax_t max_bytes);

// ReadSmallFile for a secret (a signing key, a password): PermissionDenied when the file's group
// or others may read it, as ssh refuses such a private key, so a leak is refused, not used; and
// held to ReadTrustedFile's owner and directory rules (whoever could replace it could sign in
// pillar's name, or break every reload of a TLS listener).
[[nodiscard]] absl::StatusOr<std::string> ReadSecretFile(const std::filesystem::path& path,
                                                         std::uintmax_t max_bytes);

// ReadSmallFile for a file that decides what pillar does with its traffic (the backends file):
// PermissionDenied unless it is owned by pillar's user or root and neither group nor others may
// write it. Checked on the descriptor that is read, so a swap of the path cannot slip past. The
// path is resolved one component at a time, following its symlinks and "..", and every
// directory it goes through must be owned by pillar's user or root and not writable by others:
// whoever may write one could put another file or a symlink in its place (one to a root-owned
// bundle of every public CA, say). Its group may write one (operators sharing /etc/pillar), and
// others may write one with the sticky bit (/tmp): they cannot replace an entry they do not own.
// The file read is the one resolved, so what was checked is what is read.
[[nodiscard]] absl::StatusOr<std::string> ReadTrustedFile(const std::filesystem::path& path,
                                                          std::uintmax_t max_bytes);

// What a file is now, as stat() sees it through symlinks, for watchers that poll (policy, JWKS,
// a listener's TLS files): it differs when the file was replaced (a rename, a symlink swap), or
// rewritten, or its mode or owner changed (a file refused for who may write it is taken once
// that is fixed). A file that cannot be stat'ed has the default stamp.
struct FileStamp {
  dev_t device = 0;
  ino_t inode = 0;
  int64_t mtime_ns = 0;
  off_t size = -1;
  mode_t mode = 0;
  uid_t owner = 0;
  bool operator==(const FileStamp&) const = default;
};
FileStamp StampOf(const std::filesystem::path& path);

// Files that are replaced whole (ports, metrics, collective results) go through
// PublishAtomically in common/env.h.

}  // namespace pillar
