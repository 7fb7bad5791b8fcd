#include "common/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "testing/temp_dir.h"

namespace pillar {
namespace {

TEST(FilesTest, ReadsASmallRegularFile) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "a.toml") << "x = 1\n";
  absl::StatusOr<std::string> text = ReadSmallFile(dir.path() / "a.toml", 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "x = 1\n");
}

TEST(FilesTest, RefusesWhatWouldHangOrExhaustMemory) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "big") << std::string(101, 'x');
  EXPECT_EQ(ReadSmallFile(dir.path() / "big", 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  // /dev/zero never ends; a directory is not a file.
  EXPECT_EQ(ReadSmallFile("/dev/zero", 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSmallFile(dir.path(), 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSmallFile(dir.path() / "missing", 100).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(FilesTest, ChecksWhatItReadsOnOneDescriptor) {
  testing::TempDir dir;
  // A FIFO would block an open for reading until a writer came: it is refused at once.
  const std::string fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadSecretFile(fifo, 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSmallFile(fifo, 100).status().code(), absl::StatusCode::kInvalidArgument);
  // /proc files report a size of 0 and are read whole.
  absl::StatusOr<std::string> status = ReadSmallFile("/proc/self/status", 1 << 20);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->find("Name:"), std::string::npos);
  // A secret others may read is refused; the mode checked is that of the file read, link or not.
  const std::filesystem::path key = dir.path() / "key";
  std::ofstream(key) << "secret";
  std::filesystem::create_symlink(key, dir.path() / "link");
  ::chmod(key.c_str(), 0644);
  EXPECT_EQ(ReadSecretFile(dir.path() / "link", 100).status().code(),
            absl::StatusCode::kPermissionDenied);
  ::chmod(key.c_str(), 0600);
  EXPECT_EQ(*ReadSecretFile(dir.path() / "link", 100), "secret");
}

// A file that decides where traffic goes must not be writable by others; what is checked is the
// file that is read, so swapping the path for a link to a loose file does not pass.
TEST(FilesTest, TrustedFilesMustBeOwnedByUsAndWritableByNoOneElse) {
  testing::TempDir dir;
  const std::filesystem::path strict = dir.path() / "strict";
  const std::filesystem::path loose = dir.path() / "loose";
  std::ofstream(strict) << "ok";
  std::ofstream(loose) << "loose";
  ::chmod(strict.c_str(), 0644);
  ::chmod(loose.c_str(), 0664);
  EXPECT_EQ(*ReadTrustedFile(strict, 100), "ok");
  absl::StatusOr<std::string> refused = ReadTrustedFile(loose, 100);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("group or others may write it"), std::string::npos);
  std::filesystem::create_symlink(loose, dir.path() / "link");
  EXPECT_EQ(ReadTrustedFile(dir.path() / "link", 100).status().code(),
            absl::StatusCode::kPermissionDenied);
  ::chmod(loose.c_str(), 0646);
  EXPECT_EQ(ReadTrustedFile(loose, 100).status().code(), absl::StatusCode::kPermissionDenied);
  ::chmod(loose.c_str(), 0600);
  EXPECT_EQ(*ReadTrustedFile(dir.path() / "link", 100), "loose");
  // Root-owned files are trusted too; a file of another user is not (only checkable as root).
  EXPECT_TRUE(ReadTrustedFile("/etc/hostname", 1 << 16).ok() ||
              !std::filesystem::exists("/etc/hostname"));
}

// Found by review helper-64: a trusted file's own owner and mode say nothing if anyone may
// write its directory: they can put another file, or a symlink to any root-owned file, in its
// place. The directories of the path, and of where its symlinks lead, are checked too.
TEST(FilesTest, TrustedFilesMustBeInDirectoriesNoOneElseMayWrite) {
  testing::TempDir dir;
  const std::filesystem::path shared = dir.path() / "shared";
  std::filesystem::create_directory(shared);
  std::ofstream(shared / "ca.pem") << "ok";
  ::chmod((shared / "ca.pem").c_str(), 0644);
  ::chmod(shared.c_str(), 0755);
  EXPECT_EQ(*ReadTrustedFile(shared / "ca.pem", 100), "ok");
  for (mode_t mode : {0757, 0777}) {
    ::chmod(shared.c_str(), mode);
    absl::StatusOr<std::string> refused = ReadTrustedFile(shared / "ca.pem", 100);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << mode;
    EXPECT_NE(refused.status().message().find("anyone may write the directory"), std::string::npos)
        << refused.status();
  }
  // Its group may: operators sharing the configuration's directory.
  ::chmod(shared.c_str(), 0775);
  EXPECT_EQ(*ReadTrustedFile(shared / "ca.pem", 100), "ok");
  // Sticky, as /tmp: others may not replace what they do not own.
  ::chmod(shared.c_str(), 01777);
  EXPECT_EQ(*ReadTrustedFile(shared / "ca.pem", 100), "ok");
  // A symlink from a safe directory into one others may write leads to what they control.
  ::chmod(shared.c_str(), 0777);
  const std::filesystem::path safe = dir.path() / "safe";
  std::filesystem::create_directory(safe);
  ::chmod(safe.c_str(), 0755);
  std::filesystem::create_symlink(shared / "ca.pem", safe / "ca.pem");
  EXPECT_EQ(ReadTrustedFile(safe / "ca.pem", 100).status().code(),
            absl::StatusCode::kPermissionDenied);
  ::chmod(shared.c_str(), 0755);
  EXPECT_EQ(*ReadTrustedFile(safe / "ca.pem", 100), "ok");
  // Found by review helper-65: a symlink's hop through a directory anyone may write, to a file
  // in a safe one, and a ".." after a symlink into such a directory, passed a check of the path
  // as given and of its canonical form. Every directory the path goes through is checked.
  const std::filesystem::path open_dir = dir.path() / "open";
  std::filesystem::create_directory(open_dir);
  std::filesystem::create_symlink(shared / "ca.pem", open_dir / "hop.pem");
  std::filesystem::create_symlink(open_dir / "hop.pem", safe / "via-hop.pem");
  std::filesystem::create_directory(open_dir / "sub");
  std::filesystem::create_symlink(open_dir / "sub", safe / "lnk");
  std::ofstream(open_dir / "ca.pem") << "planted";
  ::chmod((open_dir / "ca.pem").c_str(), 0644);
  ::chmod(open_dir.c_str(), 0755);
  EXPECT_EQ(*ReadTrustedFile(safe / "via-hop.pem", 100), "ok");
  EXPECT_EQ(*ReadTrustedFile(safe / "lnk" / ".." / "ca.pem", 100), "planted");  // as the kernel
  ::chmod(open_dir.c_str(), 0777);
  for (const std::filesystem::path& path : {safe / "via-hop.pem", safe / "lnk" / ".." / "ca.pem"}) {
    absl::StatusOr<std::string> refused = ReadTrustedFile(path, 100);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_NE(refused.status().message().find(open_dir.string()), std::string::npos)
        << refused.status();
  }
  // Secrets too: a key in a directory anyone may write could be replaced.
  std::ofstream(open_dir / "tls.key") << "secret";
  ::chmod((open_dir / "tls.key").c_str(), 0600);
  EXPECT_EQ(ReadSecretFile(open_dir / "tls.key", 100).status().code(),
            absl::StatusCode::kPermissionDenied);
  ::chmod(open_dir.c_str(), 0755);
  EXPECT_EQ(*ReadSecretFile(open_dir / "tls.key", 100), "secret");
  ::chmod(open_dir.c_str(), 0700);
}

// Found by review helper-66: a symlink in /tmp (sticky) owned by another user was followed, and
// its owner could point it at any root-owned file (a bundle of every public CA as client_ca).
TEST(FilesTest, ASymlinkOfAnotherUserIsNotFollowed) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "ca.pem") << "ok";
  ::chmod((dir.path() / "ca.pem").c_str(), 0644);
  std::filesystem::create_symlink(dir.path() / "ca.pem", dir.path() / "link.pem");
  EXPECT_EQ(*ReadTrustedFile(dir.path() / "link.pem", 100), "ok");
  // A path that goes on past a file is refused, as the kernel refuses it.
  EXPECT_EQ(ReadTrustedFile(dir.path() / "ca.pem" / "..", 100).status().code(),
            absl::StatusCode::kNotFound);
  if (::geteuid() != 0) GTEST_SKIP() << "giving a symlink to another user needs root";
  ASSERT_EQ(::lchown((dir.path() / "link.pem").c_str(), 65534, 65534), 0);
  absl::StatusOr<std::string> refused = ReadTrustedFile(dir.path() / "link.pem", 100);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("who could repoint it"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace pillar
