// Job payloads at rest (docs/formats/job-payload.md): a job's request and result are kept in the
// state store sealed with XChaCha20-Poly1305 (libsodium's secretstream), bound to the job and
// to the field, under a key the sealed bytes name by its id. Whoever reads the state file (or a
// backup of it) learns neither what was asked nor what was answered; whoever writes it cannot
// move one job's payload to another, or forge one, without the key.
//
//   PILLAR_ASSIGN_OR_RETURN(auto sealer, PayloadSealer::Load({"jobs.key", "jobs-old.key"}));
//   std::string stored = sealer->Seal(job.id, "request", body);
//   PILLAR_ASSIGN_OR_RETURN(std::string body, sealer->Open(job.id, "request", stored));
// Rotation: a new key file first in the list seals from then on; the old ones, kept after it,
// still open what they sealed until those jobs expire ([jobs] keep_ms), and can then be dropped.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/crypto.h"

namespace pillar::jobs {

class PayloadSealer {
 public:
  static constexpr size_t kKeyBytes = 32;
  static constexpr std::string_view kMagic{"pjs1", 4};

  // `key_files`: the first seals, every one opens. Each holds the key as 64 hexadecimal
  // characters (a line; `openssl rand -hex 32`) and must not be readable by group or others.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const PayloadSealer>> Load(
      const std::vector<std::string>& key_files);
  // Writes a new random key to `path` (mode 0600) unless a file is there already; true when it
  // wrote one.
  [[nodiscard]] static absl::StatusOr<bool> CreateKeyIfMissing(const std::string& path);
  // For tests: keys given directly, as raw bytes.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const PayloadSealer>> FromKeys(
      std::vector<std::string> keys);

  // `context`: what else the payload is bound to (the job queue binds a request to its owner,
  // principal, model and version, and a result to its owner, status, content type and headers),
  // so that none of it can be changed in the store without the payload failing to open.
  std::string Seal(std::string_view job_id, std::string_view field, std::string_view plaintext,
                   std::string_view context = {}) const;
  // DataLoss when the bytes are not a payload sealed for this job and field (truncated,
  // altered, another job's, or not sealed at all); NotFound naming the key id when no key given
  // has it.
  [[nodiscard]] absl::StatusOr<std::string> Open(std::string_view job_id, std::string_view field,
                                                 std::string_view sealed,
                                                 std::string_view context = {}) const;
  // The sealing key's id, 8 hexadecimal characters (the first four bytes of its BLAKE2b hash).
  std::string key_id() const;

 private:
  struct Key {
    std::array<uint8_t, 4> id;
    SecretString bytes;
  };
  explicit PayloadSealer(std::vector<Key> keys) : keys_(std::move(keys)) {}
  std::vector<Key> keys_;
};

}  // namespace pillar::jobs
