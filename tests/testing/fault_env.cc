#include "testing/fault_env.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace pillar::testing {
namespace {

[[nodiscard]] absl::Status Injected(std::string_view what,
                                    FaultEnv::Fault fault = FaultEnv::Fault::kError) {
  if (fault == FaultEnv::Fault::kNoSpace) {
    return absl::ResourceExhaustedError(std::string("injected fault: no space left on device (") +
                                        std::string(what) + ")");
  }
  return absl::InternalError(std::string("injected fault: ") + std::string(what));
}

std::string DirOf(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

class FaultFile final : public WritableFile {
 public:
  FaultFile(FaultEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}
  [[nodiscard]] absl::Status Append(std::span<const std::byte> data) override {
    std::optional<FaultEnv::Fault> fault = env_->Next();
    if (fault == FaultEnv::Fault::kShortWrite && data.size() > 1) {
      const auto half = data.first(data.size() / 2);
      (void)base_->Append(half);
      size_ += half.size();
      env_->Written(path_, size_);
      return Injected("short write");
    }
    if (fault) return Injected("write", *fault);
    absl::Status s = base_->Append(data);
    if (s.ok()) size_ += data.size();
    env_->Written(path_, size_);
    return s;
  }
  [[nodiscard]] absl::Status Sync() override {
    if (auto fault = env_->Next()) return Injected("fsync", *fault);
    absl::Status s = base_->Sync();
    if (s.ok()) env_->Synced(path_, size_);
    return s;
  }
  [[nodiscard]] absl::Status Close() override {
    if (env_->Next()) {
      (void)base_->Close();
      return Injected("close");
    }
    return base_->Close();
  }

 private:
  FaultEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
  uint64_t size_ = 0;
};

}  // namespace

std::optional<FaultEnv::Fault> FaultEnv::Next() {
  ++ops_;
  if (stopped_) return Fault::kStop;
  if (ops_ != fail_at_) return std::nullopt;
  if (fault_ == Fault::kStop) stopped_ = true;
  return fault_;
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultEnv::NewWritableFile(const std::string& path,
                                                                        uint32_t mode) {
  if (auto fault = Next()) return Injected("create", *fault);
  absl::StatusOr<std::unique_ptr<WritableFile>> base = base_->NewWritableFile(path, mode);
  if (!base.ok()) return base.status();
  synced_[path] = 0;
  written_[path] = 0;
  return std::make_unique<FaultFile>(this, path, std::move(*base));
}

absl::Status FaultEnv::CreateDir(const std::string& path) {
  if (auto fault = Next()) return Injected("mkdir", *fault);
  return base_->CreateDir(path);
}

absl::Status FaultEnv::RemoveAll(const std::string& path) {
  if (auto fault = Next()) return Injected("remove", *fault);
  if (!unremovable_.empty() && path.find(unremovable_) != std::string::npos) {
    return absl::InternalError(StrCat("cannot remove ", path, ": Input/output error"));
  }
  return base_->RemoveAll(path);
}

absl::Status FaultEnv::Rename(const std::string& from, const std::string& to) {
  if (auto fault = Next()) return Injected("rename", *fault);
  // Until the directory is synced, a crash may bring back the file this rename replaces.
  std::optional<std::string> replaced;
  if (std::filesystem::is_regular_file(to)) {
    std::ifstream in(to, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    replaced = bytes.str();
  }
  absl::Status s = base_->Rename(from, to);
  if (s.ok()) pending_renames_.push_back({from, to, DirOf(to), std::move(replaced)});
  return s;
}

absl::Status FaultEnv::SyncDir(const std::string& path) {
  if (auto fault = Next()) return Injected("fsync of a directory", *fault);
  absl::Status s = base_->SyncDir(path);
  if (s.ok()) {
    std::erase_if(pending_renames_, [&](const PendingRename& r) { return r.dir == path; });
  }
  return s;
}

void FaultEnv::Crash() {
  // Renames the directory never made durable are undone, newest first.
  for (auto it = pending_renames_.rbegin(); it != pending_renames_.rend(); ++it) {
    std::error_code ec;
    if (std::filesystem::exists(it->to)) {
      std::filesystem::rename(it->to, it->from, ec);
    }
    if (it->replaced) {
      std::ofstream out(it->to, std::ios::binary | std::ios::trunc);
      out << *it->replaced;
    }
  }
  pending_renames_.clear();
  // Bytes never synced are lost. Files are tracked under the names they were written with; a
  // directory renamed durably held only synced files (the protocol syncs before renaming).
  for (const auto& [path, written] : written_) {
    const uint64_t synced = synced_.count(path) ? synced_[path] : 0;
    if (synced < written && std::filesystem::exists(path)) {
      std::filesystem::resize_file(path, synced);
    }
  }
  written_.clear();
  synced_.clear();
  stopped_ = false;
  fail_at_ = -1;
}

}  // namespace pillar::testing
