// Fuzzes the audit log readers: a log file is whatever the disk (or an attacker with write
// access) holds. The input is an audit log; the verifier must not crash, the writer's recovery
// (torn-tail repair, tail check) must not crash, and whenever the writer agrees to extend the
// log, what it leaves must verify exactly when the input (less a torn tail) verified: appending
// never breaks a good chain nor mends a bad one.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "audit/audit_log.h"
#include "audit/audit_verifier.h"
#include "audit/file_audit_store.h"
#include "fuzz_temp_dir.h"

namespace {

struct Fixture {
  pillar::fuzz::TempDir dir{"audit"};
  pillar::signing::SigningKey key = pillar::signing::GenerateSigningKey();
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fixture;
  const std::string path = (fixture.dir.path / "audit.log").string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  const pillar::audit::VerifyReport before =
      pillar::audit::VerifyAuditFile(path, {fixture.key.public_key});
  const bool only_torn =
      !before.status.ok() && before.torn_bytes > 0 && before.first_bad_record == before.records;
  auto store = pillar::audit::FileAuditStore::Open(path);
  if (!store.ok()) return 0;
  pillar::audit::AuditLogOptions options;
  options.instance = "fuzz";
  options.fsync_interval = absl::InfiniteDuration();
  auto log = pillar::audit::AuditLog::Start(std::move(*store), options);
  if (!log.ok()) return 0;
  pillar::audit::Event event;
  event.principal = "key:fuzz";
  (*log)->Record(event);
  log->reset();
  const pillar::audit::VerifyReport after =
      pillar::audit::VerifyAuditFile(path, {fixture.key.public_key});
  if ((before.status.ok() || only_torn) && !after.status.ok()) __builtin_trap();
  return 0;
}
