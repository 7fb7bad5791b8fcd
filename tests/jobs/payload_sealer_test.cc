#include "jobs/payload_sealer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "testing/temp_dir.h"

namespace pillar::jobs {
namespace {

std::shared_ptr<const PayloadSealer> Sealer(std::vector<std::string> keys) {
  auto sealer = PayloadSealer::FromKeys(std::move(keys));
  EXPECT_TRUE(sealer.ok()) << sealer.status();
  return *sealer;
}

TEST(PayloadSealerTest, APayloadOpensOnlyForItsJobAndField) {
  auto sealer = Sealer({std::string(32, 'k')});
  const std::string body = R"({"inputs":[{"name":"x","data":[98765]}]})";
  const std::string sealed = sealer->Seal("job-1", "request", body);
  EXPECT_EQ(sealed.find("98765"), std::string::npos);
  EXPECT_EQ(sealed.substr(0, 4), "pjs1");
  EXPECT_EQ(*sealer->Open("job-1", "request", sealed), body);
  // Moved to another job, or read as the result: refused.
  EXPECT_EQ(sealer->Open("job-2", "request", sealed).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(sealer->Open("job-1", "result", sealed).status().code(), absl::StatusCode::kDataLoss);
  // Each seal draws a fresh header: the same payload twice is not the same bytes.
  EXPECT_NE(sealer->Seal("job-1", "request", body), sealed);
  EXPECT_EQ(*sealer->Open("job-1", "result", sealer->Seal("job-1", "result", "")), "");
  // And to its context: another owner, status or framing does not open it.
  const std::string bound = sealer->Seal("job-1", "result", body, "5:alice;3:200;");
  EXPECT_TRUE(sealer->Open("job-1", "result", bound, "5:alice;3:200;").ok());
  EXPECT_FALSE(sealer->Open("job-1", "result", bound, "3:bob;3:200;").ok());
  EXPECT_FALSE(sealer->Open("job-1", "result", bound).ok());
}

TEST(PayloadSealerTest, EveryAlteredOrShortenedByteIsRefused) {
  auto sealer = Sealer({std::string(32, 'k')});
  const std::string sealed = sealer->Seal("j", "result", "the answer is 42");
  for (size_t i = 0; i < sealed.size(); ++i) {
    std::string altered = sealed;
    altered[i] = char(altered[i] ^ 0x01);
    EXPECT_FALSE(sealer->Open("j", "result", altered).ok()) << "byte " << i;
  }
  for (size_t n = 0; n < sealed.size(); ++n) {
    EXPECT_FALSE(sealer->Open("j", "result", sealed.substr(0, n)).ok()) << n << " bytes";
  }
  EXPECT_FALSE(sealer->Open("j", "result", sealed + "x").ok());
  // Not sealed at all (a row written by hand): refused, not taken as it is.
  EXPECT_EQ(sealer->Open("j", "result", R"({"outputs":[]})").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(PayloadSealerTest, RotationSealsWithTheFirstKeyAndOpensWithAny) {
  const std::string old_key(32, 'o'), new_key(32, 'n');
  auto old_sealer = Sealer({old_key});
  const std::string before = old_sealer->Seal("j", "request", "kept from before");
  auto rotated = Sealer({new_key, old_key});
  EXPECT_NE(rotated->key_id(), old_sealer->key_id());
  EXPECT_EQ(*rotated->Open("j", "request", before), "kept from before");
  const std::string after = rotated->Seal("j", "request", "new");
  EXPECT_EQ(*Sealer({new_key})->Open("j", "request", after), "new");
  // Once the old key is dropped, what it sealed names the key it needs.
  absl::Status missing = Sealer({new_key})->Open("j", "request", before).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find(old_sealer->key_id()), std::string::npos) << missing;
}

TEST(PayloadSealerTest, KeyFilesAreMadePrivateAndReadStrictly) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "jobs.key").string();
  ASSERT_TRUE(*PayloadSealer::CreateKeyIfMissing(path));
  EXPECT_FALSE(*PayloadSealer::CreateKeyIfMissing(path)) << "an existing key is kept";
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto loaded = PayloadSealer::Load({path});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->key_id().size(), 8u);
  ::chmod(path.c_str(), 0644);
  EXPECT_EQ(PayloadSealer::Load({path}).status().code(), absl::StatusCode::kPermissionDenied);
  const std::string bad = (dir.path() / "bad.key").string();
  std::ofstream(bad) << "not hex at all\n";
  ::chmod(bad.c_str(), 0600);
  EXPECT_NE(PayloadSealer::Load({bad}).status().message().find("64 hexadecimal characters"),
            std::string::npos);
  EXPECT_FALSE(PayloadSealer::Load({(dir.path() / "none.key").string()}).ok());
  // A link (whoever can write the directory could point it at a key of their own) and a file of
  // another user are refused.
  ::chmod(path.c_str(), 0600);
  const std::string link = (dir.path() / "link.key").string();
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_EQ(PayloadSealer::Load({link}).status().code(), absl::StatusCode::kPermissionDenied);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    EXPECT_NE(PayloadSealer::Load({path}).status().message().find("owned by another user"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace pillar::jobs
