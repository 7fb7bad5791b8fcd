#include "audit/file_audit_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/time/clock.h"
#include "audit/audit_log_format.h"
#include "audit/audit_record.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace pillar::audit {
namespace {

[[nodiscard]] absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::InternalError(StrCat(what, " ", path, ": ", std::strerror(errno)));
}

[[nodiscard]] absl::Status WriteAll(int fd, std::string_view data, uint64_t offset) {
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

// Reads exactly `size` bytes at `offset`; a short file is an error.
[[nodiscard]] absl::Status ReadAll(int fd, char* out, uint64_t size, uint64_t offset,
                                   const std::string& path) {
  for (uint64_t done = 0; done < size;) {
    const ssize_t n = ::pread(fd, out + done, size - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot read audit log", path);
    if (n == 0) return absl::DataLossError(StrCat(path, " shrank while it was read"));
    done += uint64_t(n);
  }
  return absl::OkStatus();
}

// Opens `path` for reading as a regular file, never through a symbolic link: the writer never
// leaves a link at the log's or the kept checkpoint's name, so one there is someone else's, and
// its target is not what the writer wrote. O_NONBLOCK: a FIFO planted there is refused at once
// (as not regular) instead of waiting for a writer; it changes nothing for a regular file.
[[nodiscard]] absl::StatusOr<int> OpenRegularForReading(const std::string& path,
                                                        std::string_view what, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::InvalidArgumentError(
          StrCat(what, " ", path,
                 " is a symbolic link; pillar never leaves one there, so it is "
                 "not followed"));
    }
    if (errno == ENOENT) {
      return absl::NotFoundError(
          StrCat("cannot open ", what, " ", path, ": ", std::strerror(errno)));
    }
    return absl::PermissionDeniedError(
        StrCat("cannot open ", what, " ", path, ": ", std::strerror(errno)));
  }
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(StrCat(what, " ", path, " is not a regular file"));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileAuditStore>> FileAuditStore::Open(std::string path,
                                                                     absl::Duration lock_wait,
                                                                     Env* env) {
  // O_NOFOLLOW: whoever may write the directory could put a link to another file (state.db)
  // there, and the torn-tail repair would truncate it. O_NONBLOCK: a FIFO or device there is
  // refused at once; cleared once the file is known to be regular.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::InvalidArgumentError(
          StrCat("audit log ", path,
                 " is a symbolic link; refusing to follow it: the log must "
                 "be a regular file at that path"));
    }
    return Errno("cannot open audit log", path);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(StrCat("audit log ", path, " is not a regular file"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    absl::Status s = Errno("cannot set up audit log", path);
    ::close(fd);
    return s;
  }
  return std::unique_ptr<FileAuditStore>(new FileAuditStore(std::move(path), fd, lock_wait, env));
}

FileAuditStore::~FileAuditStore() { ::close(fd_); }

absl::Status FileAuditStore::Lock() {
  // The steady clock: a wall-clock step must neither stretch the wait nor cut it to nothing.
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(lock_wait_);
  // Short sleeps first, as the lock is normally held for milliseconds; then at most 32 ms, so a
  // released lock is taken within that (polling is not a queue: a writer that retakes the lock
  // at once can get it first, which the bound turns into a reported error, not a stall).
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return absl::OkStatus();
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return Errno("cannot lock audit log", path_);
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(32));
  }
  return absl::UnavailableError(StrCat("cannot lock audit log ", path_,
                                       ": another process has held its lock (flock) for more "
                                       "than ",
                                       absl::FormatDuration(lock_wait_),
                                       "; nothing is appended until it lets go "
                                       "(`fuser -v` on the file names it)"));
}

absl::StatusOr<ChainHead> FileAuditStore::Begin() {
  PILLAR_RETURN_IF_ERROR(Lock());
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    Abort();
    return Errno("cannot stat audit log", path_);
  }
  // The path must still name this file: records appended to a file renamed away or replaced
  // would reach no reader, and checkpoints published beside the path would describe another
  // chain than the one there.
  struct stat named;
  if (::lstat(path_.c_str(), &named) != 0 || named.st_dev != st.st_dev ||
      named.st_ino != st.st_ino) {
    Abort();
    return absl::DataLossError(
        StrCat("audit log ", path_,
               " no longer names the file this writer has open (it was "
               "removed, renamed or replaced under it); refusing to append to a file no reader "
               "would see, or to sign a checkpoint over it. Keep both files as evidence"));
  }
  const uint64_t size = uint64_t(st.st_size);
  // On every Begin, not only when the size changed: a forger can keep the size.
  absl::Status s = end_ == UINT64_MAX ? RecoverHead(size) : CheckKnownHead(size);
  if (!s.ok()) {
    Abort();
    return s;
  }
  return head_;
}

absl::Status FileAuditStore::CheckKnownHead(uint64_t size) {
  const int64_t known = head_.next_seq - 1;
  if (size < end_) {
    return absl::DataLossError(StrCat(
        "audit log ", path_, " was cut or rewritten under this writer: it is ", size,
        " bytes long, but record ", known, " that this writer wrote or checked ends at byte ", end_,
        "; refusing to append to it or to sign a checkpoint over it. Keep the file as "
        "evidence and verify it against an anchor kept off the host"));
  }
  if (end_ > last_start_) {
    // The record as this store knows it, with the LF that ends the record before it. Its chain
    // commits to every record before it, so a chain that verifies up to here is the one this
    // store knows; whether it verifies is `pillar audit verify`'s to check.
    const uint64_t from = last_start_ == 0 ? 0 : last_start_ - 1;
    std::string text(end_ - from, '\0');
    PILLAR_RETURN_IF_ERROR(ReadAll(fd_, text.data(), text.size(), from, path_));
    std::string_view record(text);
    bool intact = record.back() == '\n' && (from == last_start_ || record.front() == '\n');
    if (from < last_start_) record.remove_prefix(1);
    record.remove_suffix(1);
    RecordLine line;
    int64_t seq = -1;
    Chain chain;
    intact = intact && SplitRecordLine(record, &line) && ParseRecordSeq(line.payload, &seq) &&
             seq == known && ParseChainHex(line.chain_hex, &chain) && chain == head_.chain;
    if (!intact) {
      return absl::DataLossError(StrCat(
          "audit log ", path_,
          " was cut or rewritten under this writer: the record ending at "
          "byte ",
          end_, " is no longer record ", known, " with chain ", ChainHex(head_.chain),
          " as this writer wrote or checked it; refusing to append to it or to sign a "
          "checkpoint over it. Keep the file as evidence and verify it against an anchor kept "
          "off the host"));
    }
  }
  return size == end_ ? absl::OkStatus() : FollowAppended(size);
}

absl::Status FileAuditStore::FollowAppended(uint64_t size) {
  // Every record after the known one must link on from it, as the verifier checks them: they
  // are most often a CLI command's, and must not hide an edit. (Records appended by anyone who
  // can write the file and compute the chain look the same: docs/formats/audit-log.md.)
  ChainHead head = head_;
  uint64_t last_start = last_start_;
  uint64_t complete = end_;  // just past the last record checked
  std::string pending;       // bytes from `complete` on, read but not yet checked
  constexpr uint64_t kChunk = 1 << 20;
  for (uint64_t read_to = end_; read_to < size;) {
    const uint64_t n = std::min(kChunk, size - read_to);
    const size_t kept = pending.size();
    pending.resize(kept + n);
    PILLAR_RETURN_IF_ERROR(ReadAll(fd_, pending.data() + kept, n, read_to, path_));
    read_to += n;
    size_t begin = 0;
    for (size_t lf; (lf = pending.find('\n', begin)) != std::string::npos; begin = lf + 1) {
      RecordLine line;
      int64_t seq = -1;
      Chain chain;
      std::string_view problem;
      if (!SplitRecordLine(std::string_view(pending).substr(begin, lf - begin), &line) ||
          !ParseRecordSeq(line.payload, &seq) || !ParseChainHex(line.chain_hex, &chain)) {
        problem = "is not a record";
      } else if (seq != head.next_seq) {
        problem = "does not follow the record before it";
      } else if (hasher_.Link(head.chain, line.payload) != chain) {
        problem = "does not link on from the record before it";
      }
      if (!problem.empty()) {
        return absl::DataLossError(StrCat(
            "audit log ", path_, ": record ", head.next_seq, " at byte ", complete + begin,
            ", appended after byte ", end_, " where the last record this writer knows ends, ",
            problem,
            ": the log was altered under this writer; refusing to append to it or to "
            "sign a checkpoint over it. Keep the file as evidence and run `pillar audit verify`"));
      }
      head = ChainHead{.next_seq = seq + 1, .chain = chain};
      last_start = complete + begin;
    }
    complete += begin;
    pending.erase(0, begin);
    if (pending.size() > format::kMaxLineBytes) {
      return absl::DataLossError(StrCat("audit log ", path_, ": no record ends in the ",
                                        pending.size(), " bytes after byte ", complete,
                                        "; run `pillar audit verify`"));
    }
  }
  if (complete < size) PILLAR_RETURN_IF_ERROR(RemoveTornTail(complete, size));
  end_ = complete;
  last_start_ = last_start;
  head_ = head;
  return absl::OkStatus();
}

absl::Status FileAuditStore::RemoveTornTail(uint64_t complete, uint64_t size) {
  // A crash mid-write: the partial last record was never acknowledged as written (nothing
  // before it depends on it), so removing it loses nothing that was recorded.
  if (::ftruncate(fd_, off_t(complete)) != 0 || ::fdatasync(fd_) != 0) {
    return Errno("cannot remove the torn tail of audit log", path_);
  }
  std::fprintf(stderr, "pillar: audit log %s: removed a torn last record (%llu bytes)\n",
               path_.c_str(), static_cast<unsigned long long>(size - complete));
  repaired_bytes_ += size - complete;
  return absl::OkStatus();
}

absl::Status FileAuditStore::RecoverHead(uint64_t size) {
  // The last two records are enough: the last one's link to the one before is checked, so
  // a writer never extends a chain whose end was altered.
  const uint64_t window = std::min<uint64_t>(size, 2 * format::kMaxLineBytes + 2);
  const uint64_t start = size - window;
  std::string tail(window, '\0');
  PILLAR_RETURN_IF_ERROR(ReadAll(fd_, tail.data(), window, start, path_));
  const size_t last_lf = tail.rfind('\n');
  const uint64_t complete = last_lf == std::string::npos ? start : start + last_lf + 1;
  if (last_lf == std::string::npos && start != 0) {
    return absl::DataLossError(StrCat("audit log ", path_, ": no record ends in the last ", window,
                                      " bytes; run `pillar audit verify`"));
  }
  if (complete < size) PILLAR_RETURN_IF_ERROR(RemoveTornTail(complete, size));
  if (complete == 0) {
    end_ = 0;
    last_start_ = 0;
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
    return absl::DataLossError(
        StrCat("audit log ", path_, ": the last record ", what, "; run `pillar audit verify`"));
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
    before =
        before.substr(before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1);
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
  // Only now, so that a failed recovery is tried again from scratch.
  end_ = complete;
  last_start_ = start + uint64_t(last.data() - tail.data());
  head_ = ChainHead{.next_seq = seq + 1, .chain = chain};
  return absl::OkStatus();
}

absl::Status FileAuditStore::Commit(std::span<const EncodedRecord> records,
                                    std::string_view lines) {
  if (!behind_) behind_.emplace(end_);
  absl::Status written = WriteAll(fd_, lines, end_);
  if (!written.ok()) {
    // Take back whatever part of the batch reached the file (ENOSPC halfway). Should that fail
    // too, the next Begin takes in its complete records (they link on from end_) and removes
    // the rest as a torn tail.
    (void)::ftruncate(fd_, off_t(end_));
    Abort();
    return absl::InternalError(
        StrCat("cannot append to audit log ", path_, ": ", written.message()));
  }
  if (!records.empty() && lines.size() >= 2) {
    // The batch's last line starts just past the LF before it.
    const size_t before = lines.rfind('\n', lines.size() - 2);
    last_start_ = end_ + (before == std::string_view::npos ? 0 : before + 1);
    head_ = ChainHead{.next_seq = records.back().seq + 1, .chain = records.back().chain};
  }
  end_ += lines.size();
  behind_->Wrote(fd_, end_);
  Abort();
  return absl::OkStatus();
}

void FileAuditStore::Abort() { ::flock(fd_, LOCK_UN); }

absl::Status FileAuditStore::Sync() {
  if (::fdatasync(fd_) != 0) return Errno("cannot sync audit log", path_);
  return absl::OkStatus();
}

absl::Status FileAuditStore::PublishCheckpoint(std::string_view payload) {
  // PublishAtomically never writes through a link left at the temp name, replaces a link at the
  // side file's name rather than what it points at, and syncs the directory: a reader never
  // sees an older checkpoint after this returns.
  return PublishAtomically(*env_, StrCat(path_, format::kCheckpointFileSuffix),
                           StrCat(payload, "\n"), 0600);
}

[[nodiscard]] absl::StatusOr<uint64_t> ReadAuditFile(
    const std::string& path, const std::function<bool(std::string_view, uint64_t)>& line,
    uint64_t from) {
  struct stat st;
  PILLAR_ASSIGN_OR_RETURN(const int fd, OpenRegularForReading(path, "audit log", &st));
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  const uint64_t size = uint64_t(st.st_size);
  if (size <= from) return 0;
  auto shrank = [&] {
    return absl::DataLossError(
        StrCat("audit log ", path, " shrank while it was read (it was ", size,
               " bytes long when the read began): it was cut or rewritten meanwhile; keep a copy "
               "as evidence and read it again"));
  };
  ::posix_fadvise(fd, off_t(from), 0, POSIX_FADV_SEQUENTIAL);
  constexpr uint64_t kChunk = 1 << 20;
  constexpr size_t kKept = format::kMaxLineBytes + 1;  // of a line too long to be a record
  std::string chunk(size_t(std::min(kChunk, size - from)), '\0');
  std::string pending;         // the start of a line that began in an earlier chunk
  uint64_t line_start = from;  // where the line being read starts
  for (uint64_t at = from; at < size;) {
    const size_t n = size_t(std::min(kChunk, size - at));
    absl::Status read = ReadAll(fd, chunk.data(), n, at, path);
    if (absl::IsDataLoss(read)) return shrank();
    PILLAR_RETURN_IF_ERROR(read);
    const std::string_view data(chunk.data(), n);
    size_t begin = 0;
    for (size_t lf; (lf = data.find('\n', begin)) != std::string_view::npos; begin = lf + 1) {
      std::string_view text = data.substr(begin, lf - begin);
      if (!pending.empty()) {
        pending.append(text.substr(0, kKept - std::min(kKept, pending.size())));
        text = pending;
      }
      if (!line(text.substr(0, kKept), line_start)) return 0;
      pending.clear();
      line_start = at + lf + 1;
    }
    const std::string_view rest = data.substr(begin);
    pending.append(rest.substr(0, kKept - std::min(kKept, pending.size())));
    at += n;
  }
  // Every byte read may still have been cut meanwhile (the last chunk read whole before the cut):
  // a shorter file now is the same news.
  struct stat now;
  if (::fstat(fd, &now) == 0 && uint64_t(now.st_size) < size) return shrank();
  return size - line_start;
}

[[nodiscard]] absl::StatusOr<std::string> ReadPublishedCheckpoint(const std::string& log_path) {
  const std::string path = StrCat(log_path, format::kCheckpointFileSuffix);
  struct stat st;
  PILLAR_ASSIGN_OR_RETURN(const int fd, OpenRegularForReading(path, "kept checkpoint", &st));
  if (uint64_t(st.st_size) > format::kMaxLineBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(
        StrCat("kept checkpoint ", path, ": larger than ", format::kMaxLineBytes, " bytes"));
  }
  std::string text(size_t(st.st_size), '\0');
  absl::Status read = ReadAll(fd, text.data(), text.size(), 0, path);
  ::close(fd);
  if (!read.ok()) return read;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace pillar::audit
