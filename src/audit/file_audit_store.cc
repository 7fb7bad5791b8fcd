#include "audit/file_audit_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "audit/audit_log_format.h"
#include "audit/audit_record.h"
#include "common/files.h"
#include "common/strings.h"

namespace pillar::audit {
namespace {

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::InternalError(StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, std::string_view data, uint64_t offset) {
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(std::strerror(errno));
    }
    data.remove_prefix(size_t(n));
    offset += uint64_t(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileAuditStore>> FileAuditStore::Open(std::string path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot open audit log", path);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(StrCat("audit log ", path, " is not a regular file"));
  }
  return std::unique_ptr<FileAuditStore>(new FileAuditStore(std::move(path), fd));
}

FileAuditStore::~FileAuditStore() { ::close(fd_); }

absl::StatusOr<ChainHead> FileAuditStore::Begin() {
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) return Errno("cannot lock audit log", path_);
  }
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    Abort();
    return Errno("cannot stat audit log", path_);
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size != end_) {  // first use, or another writer appended since
    if (absl::Status s = RecoverHead(size); !s.ok()) {
      Abort();
      return s;
    }
  }
  return head_;
}

absl::Status FileAuditStore::RecoverHead(uint64_t size) {
  // The last two records are enough: the last one's link to the one before is checked, so
  // a writer never extends a chain whose end was altered.
  const uint64_t window = std::min<uint64_t>(size, 2 * format::kMaxLineBytes + 2);
  const uint64_t start = size - window;
  std::string tail(window, '\0');
  for (uint64_t done = 0; done < window;) {
    const ssize_t n = ::pread(fd_, tail.data() + done, window - done, off_t(start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("cannot read audit log", path_);
    done += uint64_t(n);
  }
  const size_t last_lf = tail.rfind('\n');
  const uint64_t complete = last_lf == std::string::npos ? start : start + last_lf + 1;
  if (last_lf == std::string::npos && start != 0) {
    return absl::DataLossError(StrCat("audit log ", path_, ": no record ends in the last ",
                                      window, " bytes; run `pillar audit verify`"));
  }
  if (complete < size) {
    // A crash mid-write: the partial last record was never acknowledged as written (nothing
    // before it depends on it), so removing it loses nothing that was recorded.
    if (::ftruncate(fd_, off_t(complete)) != 0 || ::fdatasync(fd_) != 0) {
      return Errno("cannot remove the torn tail of audit log", path_);
    }
    std::fprintf(stderr, "pillar: audit log %s: removed a torn last record (%llu bytes)\n",
                 path_.c_str(), static_cast<unsigned long long>(size - complete));
    repaired_bytes_ += size - complete;
  }
  end_ = complete;
  if (complete == 0) {
    head_ = ChainHead{};
    return absl::OkStatus();
  }
  // tail[0, last_lf) holds the complete records in the window; take the last one or two.
  std::string_view records(tail.data(), last_lf);
  const size_t previous_lf = records.rfind('\n');
  std::string_view last =
      previous_lf == std::string_view::npos ? records : records.substr(previous_lf + 1);
  const bool last_starts_file = previous_lf == std::string_view::npos && start == 0;
  auto bad = [&](std::string_view what) {
    return absl::DataLossError(StrCat("audit log ", path_, ": the last record ", what,
                                      "; run `pillar audit verify`"));
  };
  RecordLine line;
  int64_t seq;
  Chain chain;
  if (!SplitRecordLine(last, &line) || !ParseRecordSeq(line.payload, &seq) ||
      !ParseChainHex(line.chain_hex, &chain)) {
    return bad("is not a record");
  }
  Chain previous{};
  if (!last_starts_file) {
    if (previous_lf == std::string_view::npos) return bad("has no record before it in reach");
    std::string_view before = records.substr(0, previous_lf);
    before = before.substr(before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1);
    RecordLine prior;
    int64_t prior_seq;
    if (!SplitRecordLine(before, &prior) || !ParseRecordSeq(prior.payload, &prior_seq) ||
        !ParseChainHex(prior.chain_hex, &previous) || prior_seq + 1 != seq) {
      return bad("does not follow the record before it");
    }
  } else if (seq != 0) {
    return bad("is the first but is not record 0");
  }
  if (hasher_.Link(previous, line.payload) != chain) return bad("does not match its hash");
  head_ = ChainHead{.next_seq = seq + 1, .chain = chain};
  return absl::OkStatus();
}

absl::Status FileAuditStore::Commit(std::span<const EncodedRecord> records,
                                    std::string_view lines) {
  absl::Status written = WriteAll(fd_, lines, end_);
  if (!written.ok()) {
    // Take back whatever part of the batch reached the file (ENOSPC halfway).
    if (::ftruncate(fd_, off_t(end_)) != 0) end_ = UINT64_MAX;  // re-read the head next time
    Abort();
    return absl::InternalError(StrCat("cannot append to audit log ", path_, ": ",
                                      written.message()));
  }
  end_ += lines.size();
  if (!records.empty()) {
    head_ = ChainHead{.next_seq = records.back().seq + 1, .chain = records.back().chain};
  }
  Abort();
  return absl::OkStatus();
}

void FileAuditStore::Abort() { ::flock(fd_, LOCK_UN); }

absl::Status FileAuditStore::Sync() {
  if (::fdatasync(fd_) != 0) return Errno("cannot sync audit log", path_);
  return absl::OkStatus();
}

absl::Status FileAuditStore::PublishCheckpoint(std::string_view payload) {
  const std::string target = StrCat(path_, format::kCheckpointFileSuffix);
  const std::string tmp = target + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot write", tmp);
  absl::Status s = WriteAll(fd, StrCat(payload, "\n"), 0);
  if (s.ok() && ::fsync(fd) != 0) s = Errno("cannot sync", tmp);
  ::close(fd);
  if (!s.ok()) return s;
  if (::rename(tmp.c_str(), target.c_str()) != 0) return Errno("cannot rename", tmp);
  // The rename itself must survive a crash, or a reader could see an older checkpoint.
  std::filesystem::path dir = std::filesystem::path(target).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ReadAuditFile(
    const std::string& path, const std::function<bool(std::string_view, uint64_t)>& line,
    uint64_t from) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(StrCat("cannot open audit log ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(StrCat("audit log ", path, " is not a regular file"));
  }
  const size_t size = size_t(st.st_size);
  if (size <= from) {
    ::close(fd);
    return 0;
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return Errno("cannot map audit log", path);
  ::madvise(map, size, MADV_SEQUENTIAL);
  const std::string_view all(static_cast<const char*>(map), size);
  size_t offset = size_t(from);
  while (offset < size) {
    const void* lf = std::memchr(all.data() + offset, '\n', size - offset);
    if (lf == nullptr) break;
    const size_t end = size_t(static_cast<const char*>(lf) - all.data());
    if (!line(all.substr(offset, end - offset), offset)) {
      offset = size;
      break;
    }
    offset = end + 1;
  }
  ::munmap(map, size);
  return uint64_t(size - offset);
}

absl::StatusOr<std::string> ReadPublishedCheckpoint(const std::string& log_path) {
  absl::StatusOr<std::string> text =
      ReadSmallFile(StrCat(log_path, format::kCheckpointFileSuffix), format::kMaxLineBytes);
  if (!text.ok()) return text.status();
  if (!text->empty() && text->back() == '\n') text->pop_back();
  return text;
}

}  // namespace pillar::audit
