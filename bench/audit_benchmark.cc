// Audit log throughput, beside its peer in the same run (bench/run_audit.sh):
//
//   audit_benchmark pillar DIR RECORDS THREADS FSYNC_MS   AuditLog over a file, group commit
//   audit_benchmark sqlite DIR RECORDS THREADS FSYNC_MS   the peer: the same events as rows of
//                                                         an SQLite table (WAL, synchronous =
//                                                         FULL), one transaction per FSYNC_MS
//   audit_benchmark verify DIR                            VerifyAuditFile over DIR/audit.log
//                                                         (written by `pillar`), and its peer:
//                                                         one SHA-256 pass over the same bytes
//
// pillar and sqlite take events from THREADS producer threads, make them durable at most
// FSYNC_MS after they were recorded, and stop the clock when every event is durable. Each
// prints records/second; verify prints two (the verifier's, then the plain hash's).
#include <openssl/evp.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "audit/audit_log.h"
#include "audit/audit_verifier.h"
#include "audit/file_audit_store.h"

namespace {

using Clock = std::chrono::steady_clock;

pillar::audit::Event SampleEvent(const std::string& request_id) {
  static const std::string reason = "granted by rule 'tenant-users' (policy.toml:12)";
  return {.kind = pillar::audit::EventKind::kAuthorization,
          .allowed = true,
          .time_us = 1'800'000'000'000'000,
          .principal = "key:8f2a4c1d9e7b",
          .tenant = "acme",
          .action = "infer",
          .resource = "model:digits/3",
          .request_id = request_id,
          .remote = "10.1.2.3",
          .explain = [] { return reason; }};
}

double RunPillar(const std::string& dir, int64_t records, int threads, int fsync_ms) {
  auto store = pillar::audit::FileAuditStore::Open(dir + "/audit.log");
  if (!store.ok()) std::abort();
  pillar::audit::AuditLogOptions options;
  options.instance = "bench";
  options.checkpoint_key = pillar::signing::GenerateSigningKey();
  if (!pillar::signing::WriteKeyPair(*options.checkpoint_key, dir + "/audit").ok()) std::abort();
  options.checkpoint_interval = absl::Seconds(1);
  options.fsync_interval = absl::Milliseconds(fsync_ms);
  options.queue_capacity = 1 << 20;
  auto log = pillar::audit::AuditLog::Start(std::move(*store), options);
  if (!log.ok()) std::abort();
  const auto start = Clock::now();
  std::vector<std::thread> producers;
  for (int t = 0; t < threads; ++t) {
    producers.emplace_back([&, t] {
      for (int64_t i = t; i < records; i += threads) {
        (*log)->Record(SampleEvent("req-" + std::to_string(i)));
      }
    });
  }
  for (auto& p : producers) p.join();
  if (!(*log)->Flush(absl::Minutes(5)).ok() || (*log)->dropped() != 0) std::abort();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return double(records) / seconds;
}

double RunSqlite(const std::string& dir, int64_t records, int threads, int fsync_ms) {
  sqlite3* db = nullptr;
  if (sqlite3_open((dir + "/audit.db").c_str(), &db) != SQLITE_OK) std::abort();
  sqlite3_exec(db,
               "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
               "CREATE TABLE audit (seq INTEGER PRIMARY KEY, time INTEGER, kind TEXT, decision "
               "TEXT, principal TEXT, tenant TEXT, action TEXT, resource TEXT, reason TEXT, "
               "request_id TEXT, remote TEXT)",
               nullptr, nullptr, nullptr);
  sqlite3_stmt* insert = nullptr;
  if (sqlite3_prepare_v2(db, "INSERT INTO audit VALUES (NULL,?,?,?,?,?,?,?,?,?,?)", -1, &insert,
                         nullptr) != SQLITE_OK) {
    std::abort();
  }
  // The same shape as AuditLog: producers copy the event's fields into a queue; one writer
  // commits what is queued, a transaction at most every fsync_ms.
  struct Row {
    int64_t time;
    std::string principal, tenant, action, resource, reason, request_id, remote;
  };
  absl::Mutex mu;
  std::vector<Row> queue;
  std::atomic<int64_t> done{0};
  const auto start = Clock::now();
  std::thread writer([&] {
    std::vector<Row> batch;
    while (done.load() < records) {
      std::this_thread::sleep_for(std::chrono::milliseconds(fsync_ms));
      {
        absl::MutexLock lock(&mu);
        batch.swap(queue);
      }
      if (batch.empty()) continue;
      sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
      for (const Row& r : batch) {
        sqlite3_bind_int64(insert, 1, r.time);
        sqlite3_bind_text(insert, 2, "authorization", -1, SQLITE_STATIC);
        sqlite3_bind_text(insert, 3, "allow", -1, SQLITE_STATIC);
        sqlite3_bind_text(insert, 4, r.principal.data(), int(r.principal.size()), SQLITE_STATIC);
        sqlite3_bind_text(insert, 5, r.tenant.data(), int(r.tenant.size()), SQLITE_STATIC);
        sqlite3_bind_text(insert, 6, r.action.data(), int(r.action.size()), SQLITE_STATIC);
        sqlite3_bind_text(insert, 7, r.resource.data(), int(r.resource.size()), SQLITE_STATIC);
        sqlite3_bind_text(insert, 8, r.reason.data(), int(r.reason.size()), SQLITE_STATIC);
        sqlite3_bind_text(insert, 9, r.request_id.data(), int(r.request_id.size()), SQLITE_STATIC);
        sqlite3_bind_text(insert, 10, r.remote.data(), int(r.remote.size()), SQLITE_STATIC);
        if (sqlite3_step(insert) != SQLITE_DONE) std::abort();
        sqlite3_reset(insert);
      }
      if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) std::abort();
      done += int64_t(batch.size());
      batch.clear();
    }
  });
  std::vector<std::thread> producers;
  for (int t = 0; t < threads; ++t) {
    producers.emplace_back([&, t] {
      for (int64_t i = t; i < records; i += threads) {
        const std::string id = "req-" + std::to_string(i);
        const pillar::audit::Event e = SampleEvent(id);
        Row row{e.time_us,
                std::string(e.principal),
                std::string(e.tenant),
                std::string(e.action),
                std::string(e.resource),
                e.explain(),
                std::string(e.request_id),
                std::string(e.remote)};
        absl::MutexLock lock(&mu);
        queue.push_back(std::move(row));
      }
    });
  }
  for (auto& p : producers) p.join();
  writer.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  sqlite3_finalize(insert);
  sqlite3_close(db);
  return double(records) / seconds;
}

// The verifier over the log `pillar` mode wrote, then the floor for any verifier of the same
// bytes: hashing them once (OpenSSL SHA-256, SHA-NI where the CPU has it). Records/second each.
void RunVerify(const std::string& dir) {
  const std::string path = dir + "/audit.log";
  auto key = pillar::signing::ReadPublicKey(dir + "/audit.pub");
  if (!key.ok()) std::abort();
  auto start = Clock::now();
  pillar::audit::VerifyReport report = pillar::audit::VerifyAuditFile(path, {*key});
  const double verify_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!report.status.ok()) {
    std::fprintf(stderr, "%s\n", report.Summary().c_str());
    std::abort();
  }
  start = Clock::now();
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  auto bytes = pillar::audit::ReadAuditFile(path, [&](std::string_view line, uint64_t) {
    EVP_DigestUpdate(ctx, line.data(), line.size() + 1);  // the line and its LF
    return true;
  });
  unsigned char digest[32];
  unsigned int size = 0;
  EVP_DigestFinal_ex(ctx, digest, &size);
  EVP_MD_CTX_free(ctx);
  const double hash_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!bytes.ok()) std::abort();
  std::printf("%.0f %.0f\n", double(report.records) / verify_s, double(report.records) / hash_s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "verify") {
    RunVerify(argv[2]);
    return 0;
  }
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s pillar|sqlite DIR RECORDS THREADS FSYNC_MS\n", argv[0]);
    return 2;
  }
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);  // as pillar's main does
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  const int64_t records = std::atoll(argv[3]);
  const int threads = std::atoi(argv[4]);
  const int fsync_ms = std::atoi(argv[5]);
  const double rate = mode == "pillar" ? RunPillar(dir, records, threads, fsync_ms)
                                       : RunSqlite(dir, records, threads, fsync_ms);
  std::printf("%.0f\n", rate);
  return 0;
}
