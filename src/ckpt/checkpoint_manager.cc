#include "ckpt/checkpoint_manager.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/time/clock.h"
#include "ckpt/checkpoint_format.h"
#include "common/strings.h"
#include "common/thread_name.h"

namespace pillar::ckpt {
Source HostSource(std::string name, DType dtype, std::vector<int64_t> shape,
                  std::span<const std::byte> data) {
  return {.name = std::move(name),
          .dtype = dtype,
          .shape = std::move(shape),
          .bytes = data.size(),
          .copy = [data](std::span<std::byte> out) {
            if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
          }};
}

CheckpointManager::CheckpointManager(Options options)
    : options_(std::move(options)), fast_(options_.env, options_.fast_dir) {
  if (!options_.durable_dir.empty()) durable_.emplace(options_.env, options_.durable_dir);
}

absl::StatusOr<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(Options options) {
  if (options.fast_dir.empty()) return absl::InvalidArgumentError("fast_dir is required");
  std::unique_ptr<CheckpointManager> m(new CheckpointManager(std::move(options)));
  if (absl::Status s = m->fast_.Prepare(); !s.ok()) return s;
  if (m->durable_) {
    if (absl::Status s = m->durable_->Prepare(); !s.ok()) return s;
  }
  m->writer_ = std::thread([raw = m.get()] {
    NameThisThread("ckpt-writer");
    raw->WriteLoop();
  });
  if (m->durable_) {
    m->drainer_ = std::thread([raw = m.get()] {
      NameThisThread("ckpt-drainer");
      raw->DrainLoop();
    });
  }
  return m;
}

CheckpointManager::~CheckpointManager() {
  (void)Wait();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // Open() may fail before the threads start (a run another process holds): review helper-122
  // found every refused trainer aborting here on a join of a thread never started.
  if (writer_.joinable()) writer_.join();
  if (drainer_.joinable()) drainer_.join();
}

absl::StatusOr<bool> CheckpointManager::Save(int64_t step, std::span<const Source> sources,
                                             std::map<std::string, std::string> metadata) {
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) {
    absl::Status error = std::move(error_);
    error_ = absl::OkStatus();
    return error;
  }
  if (pending_.has_value()) {
    if (options_.skip_when_busy) return false;
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !pending_.has_value(); };
    mu_.Await(absl::Condition(&idle));
  }
  uint64_t total = 0;
  for (const Source& s : sources) total = format::AlignEntryOffset(total) + s.bytes;
  if (total > staging_capacity_) {
    // Grows once to the largest checkpoint, then is reused: the memory a save needs is bounded
    // by one checkpoint's size.
    staging_ = std::make_unique_for_overwrite<std::byte[]>(std::max<uint64_t>(total, 1));
    staging_capacity_ = total;
  }
  Pending pending;
  pending.step = step;
  pending.metadata = std::move(metadata);
  uint64_t at = 0;
  for (const Source& s : sources) {
    at = format::AlignEntryOffset(at);
    pending.entries.push_back({s.name, s.dtype, s.shape, std::span(staging_.get() + at, s.bytes)});
    at += s.bytes;
  }
  if (options_.pipelined_snapshot && !sources.empty()) {
    pending.sources.assign(sources.begin(), sources.end());
    copying_ = true;
  } else {
    CopyIntoStaging(sources, pending.entries);
    pending.snapshot_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  }
  pending_ = std::move(pending);
  stall_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
  return true;
}

void CheckpointManager::CopyIntoStaging(std::span<const Source> sources,
                                        std::span<const EntryView> entries) const {
  // Unpipelined, the copies are the training loop's whole stall: spread them over the cores.
  std::atomic<size_t> next{0};
  uint64_t total = 0;
  for (const EntryView& e : entries) total += e.data.size();
  auto copy = [&] {
    for (size_t i; (i = next.fetch_add(1)) < sources.size();) {
      const EntryView& e = entries[i];
      if (!e.data.empty()) {
        // The staging buffer is ours; EntryView holds it as const for the writer's sake.
        sources[i].copy(std::span(const_cast<std::byte*>(e.data.data()), e.data.size()));
      }
    }
  };
  const size_t helpers =
      std::min<size_t>(sources.size(), size_t(std::max(1, options_.snapshot_threads))) - 1;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < helpers && total >= (64u << 20); ++t) pool.emplace_back(copy);
  copy();
  for (std::thread& t : pool) t.join();
}

void CheckpointManager::AwaitSnapshot() {
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  if (!copying_) return;
  auto copied = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !copying_; };
  mu_.Await(absl::Condition(&copied));
  stall_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
}

absl::Status CheckpointManager::PruneTier(RunDirectory& tier, int64_t step) {
  absl::StatusOr<Pruned> pruned = tier.Prune(options_.retention, step);
  if (!pruned.ok()) return pruned.status();
  absl::MutexLock lock(&said_mu_);
  for (const std::string& why : pruned->not_removed) {
    if (!said_not_removed_.insert(tier.root() + "/" + why).second) continue;
    std::fprintf(stderr, "pillar: checkpoint retention: %s\n", ForTerminal(why).c_str());
  }
  return absl::OkStatus();
}

void CheckpointManager::WriteLoop() {
  for (;;) {
    Pending job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return pending_.has_value() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (!pending_.has_value()) return;
      job = *pending_;  // the views still point into staging_, which is not touched meanwhile
    }
    if (!job.sources.empty()) {
      const absl::Time start = absl::Now();
      CopyIntoStaging(job.sources, job.entries);
      // The manifest records the copy's duration: an upper bound of the loop's stall.
      job.snapshot_seconds = absl::ToDoubleSeconds(absl::Now() - start);
      job.sources.clear();  // the caller may release them now
      absl::MutexLock lock(&mu_);
      pending_->sources.clear();
      copying_ = false;
    }
    WriteOptions write = options_.write;
    write.snapshot_seconds = job.snapshot_seconds;
    absl::StatusOr<Manifest> manifest = WriteCheckpoint(*options_.env, fast_.StepPath(job.step),
                                                        job.step, job.entries, job.metadata, write);
    absl::Status status = manifest.status();
    if (status.ok()) status = fast_.PublishLatest(job.step);
    if (status.ok()) status = PruneTier(fast_, job.step);
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      costs_ = {.snapshot_seconds = job.snapshot_seconds,
                .stall_seconds = stall_seconds_,
                .write_seconds = manifest->save_seconds,
                .bytes = manifest->TotalBytes()};
      if (durable_) to_drain_ = job.step;  // newer replaces older: the drain keeps up or skips
    } else if (error_.ok()) {
      error_ = absl::Status(status.code(),
                            StrCat("checkpoint at step ", job.step, ": ", status.message()));
    }
    pending_.reset();
  }
}

void CheckpointManager::DrainLoop() {
  for (;;) {
    int64_t step;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return to_drain_.has_value() || (stopping_ && !pending_.has_value());
      };
      mu_.Await(absl::Condition(&ready));
      if (!to_drain_.has_value()) return;
      step = *to_drain_;
      to_drain_.reset();
      draining_ = true;
    }
    // A step already there is taken only when it verifies; one that does not (a copy of an
    // earlier run's, damage) is set aside and copied again (review helper-121: an empty
    // directory at the step's name was published as the durable tier's latest).
    absl::Status status;
    const std::string there = durable_->StepPath(step);
    if (options_.env->IsLink(there)) {
      status = durable_->SetAside(step).status();  // a link is renamed, never followed
    } else if (options_.env->Exists(there)) {
      // Only damage is set aside: a step unreadable for another reason is an error to report,
      // not ours to move (review helper-123).
      status = durable_->Verify(step);
      if (IsCheckpointDamage(status)) status = durable_->SetAside(step).status();
    }
    if (status.ok() && !options_.env->Exists(durable_->StepPath(step))) {
      status = CopyCheckpoint(*options_.env, fast_.StepPath(step), durable_->StepPath(step));
    }
    if (status.ok()) status = durable_->PublishLatest(step);
    if (status.ok()) status = PruneTier(*durable_, step);
    absl::MutexLock lock(&mu_);
    draining_ = false;
    // Retention on the fast tier may remove a step before it is drained when saves come faster
    // than the drain: a newer one is queued by then, and it is the one that matters.
    if (absl::IsNotFound(status) && to_drain_.has_value()) status = absl::OkStatus();
    if (!status.ok() && error_.ok()) {
      error_ = absl::Status(status.code(), StrCat("draining step ", step, " to ", durable_->root(),
                                                  ": ", status.message()));
    }
  }
}

absl::Status CheckpointManager::Wait() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !pending_.has_value() && !to_drain_.has_value() && !draining_;
  };
  mu_.Await(absl::Condition(&idle));
  absl::Status error = std::move(error_);
  error_ = absl::OkStatus();
  return error;
}

absl::StatusOr<LoadedCheckpoint> CheckpointManager::LoadLatest(
    std::vector<std::string>* notes) const {
  std::vector<std::string> fast_notes;
  absl::StatusOr<LoadedCheckpoint> fast = fast_.LoadLatest(&fast_notes);
  for (const std::string& n : fast_notes) {
    if (notes != nullptr) notes->push_back(StrCat(fast_.root(), "/", n));
  }
  if (!durable_) return fast;
  if (!fast.ok() && !absl::IsNotFound(fast.status())) return fast;
  // The durable tier may hold a newer one (this machine's scratch is new, or was wiped).
  std::vector<std::string> durable_notes;
  absl::StatusOr<LoadedCheckpoint> durable = durable_->LoadLatest(&durable_notes);
  for (const std::string& n : durable_notes) {
    if (notes != nullptr) notes->push_back(StrCat(durable_->root(), "/", n));
  }
  if (!durable.ok() && !absl::IsNotFound(durable.status())) return durable;
  if (fast.ok() && (!durable.ok() || durable->manifest().step <= fast->manifest().step)) {
    return fast;
  }
  if (durable.ok()) return durable;
  return fast;
}

absl::StatusOr<std::vector<std::string>> CheckpointManager::SetAsideNewerThan(int64_t step) {
  return fast_.SetAsideNewerThan(step);
}

CheckpointManager::Costs CheckpointManager::last_costs() const {
  absl::MutexLock lock(&mu_);
  return costs_;
}

[[nodiscard]] absl::Status CopyCheckpoint(Env& env, const std::string& from,
                                          const std::string& to) {
  absl::StatusOr<Manifest> manifest = ReadManifest(env, from);
  if (!manifest.ok()) return manifest.status();
  const std::string tmp = StrCat(to, format::kTmpSuffix);
  if (absl::Status s = env.RemoveAll(tmp); !s.ok()) return s;
  if (absl::Status s = env.CreateDir(tmp); !s.ok()) return s;
  std::vector<std::string> files;
  for (const ShardInfo& shard : manifest->shards) files.push_back(shard.file);
  files.emplace_back(format::kManifestFile);  // last, as when it was written
  std::vector<std::byte> chunk(8 << 20);
  for (const std::string& name : files) {
    const std::string source = StrCat(from, "/", name);
    absl::StatusOr<uint64_t> size = env.FileSize(source);
    if (!size.ok()) return size.status();
    absl::StatusOr<std::unique_ptr<WritableFile>> out =
        env.NewWritableFile(StrCat(tmp, "/", name), 0600);
    if (!out.ok()) return out.status();
    for (uint64_t at = 0; at < *size;) {
      const size_t n = size_t(std::min<uint64_t>(chunk.size(), *size - at));
      if (absl::Status s = env.ReadAt(source, at, std::span(chunk.data(), n)); !s.ok()) return s;
      if (absl::Status s = (*out)->Append(std::span(chunk.data(), n)); !s.ok()) return s;
      at += n;
    }
    if (absl::Status s = (*out)->Sync(); !s.ok()) return s;
    if (absl::Status s = (*out)->Close(); !s.ok()) return s;
  }
  // What arrived is what was written: a copy is published only when it verifies.
  if (absl::Status s = VerifyCheckpoint(env, tmp, *manifest); !s.ok()) return s;
  if (absl::Status s = env.SyncDir(tmp); !s.ok()) return s;
  if (absl::Status s = env.Rename(tmp, to); !s.ok()) return s;
  const std::string parent = std::filesystem::path(to).parent_path().string();
  return env.SyncDir(parent.empty() ? "." : parent);
}

}  // namespace pillar::ckpt
