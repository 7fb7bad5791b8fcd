#include "signing/model_manifest.h"

#include <fcntl.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "common/crypto.h"
#include "common/directory.h"
#include "common/json_writer.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "signing/envelope.h"
#include "signing/manifest_format.h"

namespace pillar::signing {
namespace {

namespace fs = std::filesystem;

constexpr size_t kReadChunk = 1 << 20;

std::string DigestHex(const Sha256Hasher::Digest& digest) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

// Reads `file` to its end through SHA-256, once: model files are gigabytes, so they are streamed
// unless `keep` asks for the bytes, which are then exactly the bytes hashed. When
// `expected_size` is given, a file of another size is refused before it is read, and one that
// grows while being read is refused.
[[nodiscard]] absl::StatusOr<FileDigest> DigestFile(File& file, std::string path,
                                                    std::optional<uint64_t> expected_size,
                                                    std::string* keep) {
  Sha256Hasher hasher;
  uint64_t size = 0;
  std::string scratch;
  if (keep != nullptr) {
    keep->clear();
    keep->resize(file.size());  // exact when the size is as signed, and it is checked below
  } else {
    scratch.resize(kReadChunk);
  }
  for (;;) {
    char* out;
    size_t room;
    if (keep != nullptr) {
      if (size == keep->size()) keep->resize(keep->size() + kReadChunk);  // grew after fstat
      out = keep->data() + size;
      room = keep->size() - size;
    } else {
      out = scratch.data();
      room = scratch.size();
    }
    PILLAR_ASSIGN_OR_RETURN(const size_t n, file.Read(out, room));
    if (n == 0) break;
    hasher.Update(std::string_view(out, n));
    size += n;
    if (expected_size && size > *expected_size) break;
  }
  if (keep != nullptr) keep->resize(std::min<uint64_t>(size, keep->size()));
  return FileDigest{std::move(path), DigestHex(hasher.Finish()), size};
}

[[nodiscard]] absl::StatusOr<std::string> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return absl::InvalidArgumentError("odd hex length");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return absl::InvalidArgumentError("not lowercase hex");
    out[i] = char(hi * 16 + lo);
  }
  return out;
}

std::string Statement(const std::string& name, const std::vector<FileDigest>& files) {
  JsonWriter w(256 + files.size() * 128);
  w.BeginObject();
  w.Key("_type");
  w.String(kStatementType);
  w.Key("subject");
  w.BeginArray();
  w.BeginObject();
  w.Key("name");
  w.String(name);
  w.Key("digest");
  w.BeginObject();
  w.Key("sha256");
  w.String(RootDigest(files));
  w.EndObject();
  w.EndObject();
  w.EndArray();
  w.Key("predicateType");
  w.String(kPredicateType);
  w.Key("predicate");
  w.BeginObject();
  w.Key("files");
  w.BeginArray();
  for (const FileDigest& f : files) {
    w.BeginObject();
    w.Key("name");
    w.String(f.path);
    w.Key("digest");
    w.BeginObject();
    w.Key("sha256");
    w.String(f.sha256);
    w.EndObject();
    w.Key("size");
    w.Int(int64_t(f.size));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.EndObject();
  return std::move(w).Take();
}

[[nodiscard]] absl::Status Invalid(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(path, ": ", what));
}

// The files of the version besides the manifest (and its temporary file).
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ListVersionFiles(const Directory& dir) {
  PILLAR_ASSIGN_OR_RETURN(std::vector<std::string> names, dir.ListFiles(kMaxFiles + 2));
  std::erase(names, std::string(kManifestFile));
  std::erase_if(names, [](const std::string& name) { return IsManifestTempFile(name); });
  if (names.size() > kMaxFiles) return Invalid(dir.path(), "too many files");
  return names;
}

[[nodiscard]] absl::StatusOr<std::string> ReadManifest(const Directory& dir) {
  absl::StatusOr<std::string> text = ReadFileBeneath(dir, kManifestFile, kMaxManifestBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::FailedPreconditionError(
        StrCat(dir.path(), " is not signed (no ", kManifestFile, ")"));
  }
  return text;
}

struct SignedStatement {
  std::string name;
  std::string root_digest;
  std::map<std::string, FileDigest, std::less<>> files;
};

[[nodiscard]] absl::StatusOr<SignedStatement> ParseStatement(const std::string& path,
                                                             const std::string& payload) {
  simdjson::dom::parser parser;
  simdjson::dom::element statement;
  std::string_view type, predicate_type, name, root_digest;
  simdjson::dom::array subjects, listed;
  if (parser.parse(payload).get(statement) != simdjson::SUCCESS ||
      statement["_type"].get_string().get(type) != simdjson::SUCCESS || type != kStatementType ||
      statement["predicateType"].get_string().get(predicate_type) != simdjson::SUCCESS ||
      predicate_type != kPredicateType ||
      statement["subject"].get_array().get(subjects) != simdjson::SUCCESS || subjects.size() != 1 ||
      subjects.at(0)["name"].get_string().get(name) != simdjson::SUCCESS ||
      subjects.at(0)["digest"]["sha256"].get_string().get(root_digest) != simdjson::SUCCESS ||
      statement["predicate"]["files"].get_array().get(listed) != simdjson::SUCCESS) {
    return Invalid(path, "the signed statement is not a pillar model manifest");
  }
  SignedStatement out{std::string(name), std::string(root_digest), {}};
  for (simdjson::dom::element f : listed) {
    std::string_view file_name, digest;
    uint64_t size = 0;
    if (f["name"].get_string().get(file_name) != simdjson::SUCCESS ||
        f["digest"]["sha256"].get_string().get(digest) != simdjson::SUCCESS ||
        f["size"].get_uint64().get(size) != simdjson::SUCCESS || digest.size() != 64 ||
        !HexDecode(digest).ok()) {
      return Invalid(path, "a listed file lacks name, sha256 or size");
    }
    if (!IsPlainRelativePath(file_name) || file_name == kManifestFile ||
        IsManifestTempFile(file_name)) {
      return Invalid(path, StrCat("listed file '", file_name.substr(0, 256),
                                  "' is not a plain "
                                  "relative path of the version"));
    }
    out.files[std::string(file_name)] = {std::string(file_name), std::string(digest), size};
  }
  if (out.files.size() > kMaxFiles) return Invalid(path, "too many files");
  return out;
}

}  // namespace

[[nodiscard]] absl::StatusOr<std::vector<FileDigest>> DigestDirectory(const std::string& dir) {
  PILLAR_ASSIGN_OR_RETURN(Directory directory, Directory::Open(dir));
  PILLAR_ASSIGN_OR_RETURN(std::vector<std::string> names, ListVersionFiles(directory));
  std::vector<FileDigest> files;
  files.reserve(names.size());
  for (std::string& name : names) {
    PILLAR_ASSIGN_OR_RETURN(File file, directory.OpenFile(name));
    PILLAR_ASSIGN_OR_RETURN(FileDigest digest,
                            DigestFile(file, std::move(name), std::nullopt, nullptr));
    files.push_back(std::move(digest));
  }
  return files;  // sorted: ListFiles sorts
}

std::string RootDigest(const std::vector<FileDigest>& files) {
  std::string input;
  for (const FileDigest& f : files) {
    input += f.path;
    input.push_back('\0');
    input += *HexDecode(f.sha256);
  }
  return HexEncode(Sha256(input));
}

[[nodiscard]] absl::Status SignModel(const std::string& dir, const std::string& name,
                                     const SigningKey& key, Env& env) {
  absl::StatusOr<std::vector<FileDigest>> files = DigestDirectory(dir);
  if (!files.ok()) return files.status();
  return SignDigests(dir, name, *files, key, env);
}

[[nodiscard]] absl::Status SignDigests(const std::string& dir, const std::string& name,
                                       const std::vector<FileDigest>& files, const SigningKey& key,
                                       Env& env) {
  if (files.empty()) return absl::InvalidArgumentError(StrCat(dir, " holds no files to sign"));
  const std::string text = SealEnvelope(kPayloadType, Statement(name, files), key) + "\n";
  return PublishAtomically(env, (fs::path(dir) / kManifestFile).string(), text, 0644);
}

[[nodiscard]] absl::StatusOr<std::vector<FileDigest>> CopyVersion(const std::string& from,
                                                                  const std::string& to) {
  PILLAR_ASSIGN_OR_RETURN(Directory source, Directory::Open(from));
  PILLAR_ASSIGN_OR_RETURN(std::vector<std::string> names, source.ListFiles(kMaxFiles + 2));
  std::erase_if(names, [](const std::string& name) { return IsManifestTempFile(name); });
  if (names.size() > kMaxFiles + 1) return Invalid(from, "too many files");
  if (::mkdir(to.c_str(), 0755) != 0) {
    return absl::InternalError(StrCat("cannot create ", to, ": ", std::strerror(errno)));
  }
  const int root = ::open(to.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root < 0) return absl::InternalError(StrCat("cannot open ", to, ": ", std::strerror(errno)));
  absl::Cleanup close_root = [root] { ::close(root); };
  // Creates `name` beneath `to` for writing, each directory made and entered by descriptor and
  // none of them, nor the file, through a link: the copy lands where it is meant to.
  auto create = [&](const std::string& name) -> absl::StatusOr<int> {
    const std::vector<std::string_view> parts = Split(name, '/');
    int at = root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::string part(parts[i]);
      if (::mkdirat(at, part.c_str(), 0755) != 0 && errno != EEXIST) {
        if (at != root) ::close(at);
        return absl::InternalError(
            StrCat("cannot create ", to, "/", name, ": ", std::strerror(errno)));
      }
      const int next = ::openat(at, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      const int error = errno;
      if (at != root) ::close(at);
      if (next < 0) {
        return absl::InternalError(
            StrCat("cannot open ", to, "/", name, ": ", std::strerror(error)));
      }
      at = next;
    }
    const int fd = ::openat(at, std::string(parts.back()).c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    const int error = errno;
    if (at != root) ::close(at);
    if (fd < 0) {
      return absl::InternalError(
          StrCat("cannot create ", to, "/", name, ": ", std::strerror(error)));
    }
    return fd;
  };
  std::vector<FileDigest> files;
  std::string buffer(kReadChunk, '\0');
  for (const std::string& name : names) {
    PILLAR_ASSIGN_OR_RETURN(File in, source.OpenFile(name));
    const std::string target = StrCat(to, "/", name);
    PILLAR_ASSIGN_OR_RETURN(const int out, create(name));
    Sha256Hasher hasher;
    uint64_t size = 0;
    absl::Status failure;
    for (;;) {
      absl::StatusOr<size_t> n = in.Read(buffer.data(), buffer.size());
      if (!n.ok()) {
        failure = n.status();
        break;
      }
      if (*n == 0) break;
      hasher.Update(std::string_view(buffer.data(), *n));
      size += *n;
      if (::write(out, buffer.data(), *n) != ssize_t(*n)) {
        failure = absl::InternalError(StrCat("cannot write ", target, ": ", std::strerror(errno)));
        break;
      }
    }
    ::close(out);
    if (!failure.ok()) return failure;
    if (name == kManifestFile) continue;
    files.push_back({name, DigestHex(hasher.Finish()), size});
  }
  return files;  // sorted, as ListFiles is
}

[[nodiscard]] absl::StatusOr<std::string> SignedSubject(const std::string& dir,
                                                        const std::vector<PublicKey>& trusted) {
  PILLAR_ASSIGN_OR_RETURN(Directory directory, Directory::Open(dir));
  PILLAR_ASSIGN_OR_RETURN(std::string text, ReadManifest(directory));
  const std::string path = StrCat(dir, "/", kManifestFile);
  PILLAR_ASSIGN_OR_RETURN(OpenedEnvelope envelope, OpenEnvelope(text, kPayloadType, trusted, path));
  PILLAR_ASSIGN_OR_RETURN(SignedStatement statement, ParseStatement(path, envelope.payload));
  return statement.name;
}

[[nodiscard]] absl::StatusOr<std::string> ClaimedRootDigest(const std::string& dir) {
  PILLAR_ASSIGN_OR_RETURN(Directory directory, Directory::Open(dir));
  PILLAR_ASSIGN_OR_RETURN(std::string text, ReadManifest(directory));
  simdjson::dom::parser parser;
  simdjson::dom::element envelope;
  std::string_view payload_text;
  if (parser.parse(text).get(envelope) != simdjson::SUCCESS ||
      envelope["payload"].get_string().get(payload_text) != simdjson::SUCCESS) {
    return Invalid(dir, "the manifest is not an envelope");
  }
  absl::StatusOr<std::string> payload = Base64Decode(payload_text);
  if (!payload.ok()) return Invalid(dir, "payload is not base64");
  PILLAR_ASSIGN_OR_RETURN(SignedStatement statement, ParseStatement(dir, *payload));
  return statement.root_digest;
}

[[nodiscard]] absl::StatusOr<VerifiedModel> VerifyModel(const std::string& dir,
                                                        const std::vector<PublicKey>& trusted,
                                                        const VerifyOptions& options) {
  PILLAR_ASSIGN_OR_RETURN(Directory directory, Directory::Open(dir));
  const std::string path = StrCat(dir, "/", kManifestFile);
  PILLAR_ASSIGN_OR_RETURN(std::string text, ReadManifest(directory));
  PILLAR_ASSIGN_OR_RETURN(OpenedEnvelope envelope, OpenEnvelope(text, kPayloadType, trusted, path));
  // The statement, now authenticated.
  PILLAR_ASSIGN_OR_RETURN(SignedStatement statement, ParseStatement(path, envelope.payload));
  VerifiedModel model{statement.name, statement.root_digest, envelope.key_id, {}, {}};
  for (auto& [n, f] : statement.files) model.files.push_back(f);
  if (RootDigest(model.files) != model.root_digest) {
    return Invalid(path, "the root digest does not match the listed files");
  }
  // A signature speaks for one model version: a copy of it anywhere else is not that version.
  if (!options.expected_name.empty() && statement.name != options.expected_name) {
    return absl::PermissionDeniedError(StrCat(dir, ": signed as '", statement.name.substr(0, 256),
                                              "', but served as '", options.expected_name,
                                              "' (a signature names its model and version)"));
  }
  // The files on disk now, against what was signed: each read once, by descriptor.
  PILLAR_ASSIGN_OR_RETURN(std::vector<std::string> present, ListVersionFiles(directory));
  for (const std::string& name : present) {
    if (!statement.files.contains(name)) {
      return absl::DataLossError(StrCat(dir, ": ", name, " was added after signing"));
    }
  }
  const std::set<std::string, std::less<>> keep(options.keep.begin(), options.keep.end());
  for (const auto& [name, signed_file] : statement.files) {
    absl::StatusOr<File> file = directory.OpenFile(name);
    if (absl::IsNotFound(file.status())) {
      return absl::DataLossError(StrCat(dir, ": ", name, " was removed after signing"));
    }
    if (!file.ok()) return file.status();
    if (file->size() != signed_file.size) {
      return absl::DataLossError(StrCat(dir, ": ", name, " changed after signing"));
    }
    std::string* kept = keep.contains(name) ? &model.contents[name] : nullptr;
    PILLAR_ASSIGN_OR_RETURN(FileDigest actual, DigestFile(*file, name, signed_file.size, kept));
    if (actual.size != signed_file.size || actual.sha256 != signed_file.sha256) {
      return absl::DataLossError(StrCat(dir, ": ", name, " changed after signing"));
    }
    if (options.after_read) options.after_read(name);
  }
  return model;
}

[[nodiscard]] absl::StatusOr<std::map<std::string, std::string, std::less<>>> ReadModelFiles(
    const std::string& dir, const std::vector<std::string>& keep) {
  PILLAR_ASSIGN_OR_RETURN(Directory directory, Directory::Open(dir));
  std::map<std::string, std::string, std::less<>> contents;
  for (const std::string& name : keep) {
    absl::StatusOr<File> opened = directory.OpenFile(name);
    if (absl::IsNotFound(opened.status())) continue;
    PILLAR_ASSIGN_OR_RETURN(File file, std::move(opened));
    PILLAR_ASSIGN_OR_RETURN(FileDigest ignored,
                            DigestFile(file, name, std::nullopt, &contents[name]));
    (void)ignored;
  }
  return contents;
}

}  // namespace pillar::signing
