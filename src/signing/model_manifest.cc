#include "signing/model_manifest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "common/crypto.h"
#include "common/files.h"
#include "common/json_writer.h"
#include "common/strings.h"
#include "signing/manifest_format.h"

namespace pillar::signing {
namespace {

namespace fs = std::filesystem;

// Streams a file through SHA-256: model files are gigabytes, never read whole.
absl::StatusOr<std::pair<std::string, uint64_t>> Sha256OfFile(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(StrCat("cannot read ", path.string()));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::string buffer(1 << 20, '\0');
  uint64_t size = 0;
  ssize_t n;
  while ((n = ::read(fd, buffer.data(), buffer.size())) > 0) {
    EVP_DigestUpdate(ctx, buffer.data(), size_t(n));
    size += uint64_t(n);
  }
  ::close(fd);
  unsigned char digest[32];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  EVP_MD_CTX_free(ctx);
  if (n < 0) return absl::InternalError(StrCat("cannot read ", path.string()));
  return std::make_pair(HexEncode(std::string_view(reinterpret_cast<char*>(digest), 32)), size);
}

absl::StatusOr<std::string> HexDecode(std::string_view hex) {
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

absl::Status Invalid(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(path, ": ", what));
}

}  // namespace

absl::StatusOr<std::vector<FileDigest>> DigestDirectory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(StrCat(dir, " is not a directory"));
  std::vector<FileDigest> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    const std::string relative = fs::relative(entry.path(), dir, ec).generic_string();
    if (entry.is_symlink(ec)) {
      return absl::InvalidArgumentError(
          StrCat(dir, ": ", relative, " is a symbolic link; sign and serve real files only"));
    }
    if (entry.is_directory(ec)) continue;
    if (!entry.is_regular_file(ec)) {
      return absl::InvalidArgumentError(StrCat(dir, ": ", relative, " is not a regular file"));
    }
    if (relative == kManifestFile) continue;
    if (files.size() >= kMaxFiles) return absl::InvalidArgumentError(StrCat(dir, ": too many files"));
    absl::StatusOr<std::pair<std::string, uint64_t>> digest = Sha256OfFile(entry.path());
    if (!digest.ok()) return digest.status();
    files.push_back({relative, std::move(digest->first), digest->second});
  }
  if (ec) return absl::InternalError(StrCat("cannot list ", dir, ": ", ec.message()));
  std::sort(files.begin(), files.end(),
            [](const FileDigest& a, const FileDigest& b) { return a.path < b.path; });
  return files;
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

std::string PreAuthEncoding(std::string_view payload_type, std::string_view payload) {
  return StrCat(kPaePrefix, " ", payload_type.size(), " ", payload_type, " ", payload.size(), " ",
                payload);
}

absl::Status SignModel(const std::string& dir, const std::string& name, const SigningKey& key) {
  absl::StatusOr<std::vector<FileDigest>> files = DigestDirectory(dir);
  if (!files.ok()) return files.status();
  if (files->empty()) return absl::InvalidArgumentError(StrCat(dir, " holds no files to sign"));
  const std::string payload = Statement(name, *files);
  const std::string signature = Sign(key, PreAuthEncoding(kPayloadType, payload));
  JsonWriter w(payload.size() * 2);
  w.BeginObject();
  w.Key("payloadType");
  w.String(kPayloadType);
  w.Key("payload");
  w.String(Base64Encode(payload));
  w.Key("signatures");
  w.BeginArray();
  w.BeginObject();
  w.Key("keyid");
  w.String(key.public_key.key_id);
  w.Key("sig");
  w.String(Base64Encode(signature));
  w.EndObject();
  w.EndArray();
  w.EndObject();
  const fs::path target = fs::path(dir) / kManifestFile;
  const fs::path tmp = fs::path(dir) / (std::string(kManifestFile) + ".tmp");
  {
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return absl::PermissionDeniedError(StrCat("cannot write ", tmp.string()));
    const std::string text = std::move(w).Take() + "\n";
    const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) return absl::InternalError(StrCat("cannot write ", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) return absl::InternalError(StrCat("cannot rename ", tmp.string(), ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<VerifiedModel> VerifyModel(const std::string& dir,
                                          const std::vector<PublicKey>& trusted) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxManifestBytes);
  if (!text.ok()) {
    return absl::FailedPreconditionError(StrCat(dir, " is not signed (no ", kManifestFile, ")"));
  }
  // The envelope: payload type, payload, and a signature from a trusted key over both.
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object envelope;
  if (parser.parse(*text).get(root) != simdjson::SUCCESS ||
      root.get_object().get(envelope) != simdjson::SUCCESS) {
    return Invalid(path, "not a JSON object");
  }
  std::string_view payload_type, payload_text;
  if (envelope["payloadType"].get_string().get(payload_type) != simdjson::SUCCESS ||
      payload_type != kPayloadType) {
    return Invalid(path, StrCat("payloadType must be ", kPayloadType));
  }
  if (envelope["payload"].get_string().get(payload_text) != simdjson::SUCCESS) {
    return Invalid(path, "no payload");
  }
  absl::StatusOr<std::string> payload = Base64Decode(payload_text);
  if (!payload.ok()) return Invalid(path, "payload is not base64");
  simdjson::dom::array signatures;
  if (envelope["signatures"].get_array().get(signatures) != simdjson::SUCCESS) {
    return Invalid(path, "no signatures");
  }
  const std::string pae = PreAuthEncoding(kPayloadType, *payload);
  std::string verified_by, seen;
  for (simdjson::dom::element s : signatures) {
    std::string_view keyid, sig_text;
    if (s["keyid"].get_string().get(keyid) != simdjson::SUCCESS ||
        s["sig"].get_string().get(sig_text) != simdjson::SUCCESS) {
      return Invalid(path, "a signature lacks keyid or sig");
    }
    StrAppend(&seen, seen.empty() ? "" : ", ", keyid.substr(0, 32));
    absl::StatusOr<std::string> sig = Base64Decode(sig_text);
    if (!sig.ok()) continue;
    for (const PublicKey& key : trusted) {
      if (key.key_id == keyid && Verify(key, pae, *sig)) verified_by = key.key_id;
    }
  }
  if (verified_by.empty()) {
    return absl::PermissionDeniedError(StrCat(
        dir, ": no valid signature by a trusted key (signatures by: ", seen.empty() ? "none" : seen,
        ")"));
  }
  // The statement, now authenticated.
  simdjson::dom::parser statement_parser;
  simdjson::dom::element statement;
  std::string_view type, predicate_type, name, root_digest;
  simdjson::dom::array subjects, listed;
  if (statement_parser.parse(*payload).get(statement) != simdjson::SUCCESS ||
      statement["_type"].get_string().get(type) != simdjson::SUCCESS || type != kStatementType ||
      statement["predicateType"].get_string().get(predicate_type) != simdjson::SUCCESS ||
      predicate_type != kPredicateType ||
      statement["subject"].get_array().get(subjects) != simdjson::SUCCESS ||
      subjects.size() != 1 ||
      subjects.at(0)["name"].get_string().get(name) != simdjson::SUCCESS ||
      subjects.at(0)["digest"]["sha256"].get_string().get(root_digest) != simdjson::SUCCESS ||
      statement["predicate"]["files"].get_array().get(listed) != simdjson::SUCCESS) {
    return Invalid(path, "the signed statement is not a pillar model manifest");
  }
  VerifiedModel model{std::string(name), std::string(root_digest), verified_by, {}};
  std::map<std::string, FileDigest> signed_files;
  for (simdjson::dom::element f : listed) {
    std::string_view file_name, digest;
    uint64_t size = 0;
    if (f["name"].get_string().get(file_name) != simdjson::SUCCESS ||
        f["digest"]["sha256"].get_string().get(digest) != simdjson::SUCCESS ||
        f["size"].get_uint64().get(size) != simdjson::SUCCESS || digest.size() != 64 ||
        !HexDecode(digest).ok()) {
      return Invalid(path, "a listed file lacks name, sha256 or size");
    }
    signed_files[std::string(file_name)] = {std::string(file_name), std::string(digest), size};
  }
  std::vector<FileDigest> listed_files;
  for (auto& [n, f] : signed_files) listed_files.push_back(f);
  if (RootDigest(listed_files) != model.root_digest) {
    return Invalid(path, "the root digest does not match the listed files");
  }
  // The files on disk now, against what was signed.
  absl::StatusOr<std::vector<FileDigest>> actual = DigestDirectory(dir);
  if (!actual.ok()) return actual.status();
  for (const FileDigest& f : *actual) {
    auto it = signed_files.find(f.path);
    if (it == signed_files.end()) {
      return absl::DataLossError(StrCat(dir, ": ", f.path, " was added after signing"));
    }
    if (it->second.sha256 != f.sha256 || it->second.size != f.size) {
      return absl::DataLossError(StrCat(dir, ": ", f.path, " changed after signing"));
    }
    signed_files.erase(it);
  }
  if (!signed_files.empty()) {
    return absl::DataLossError(
        StrCat(dir, ": ", signed_files.begin()->first, " was removed after signing"));
  }
  model.files = std::move(listed_files);
  return model;
}

}  // namespace pillar::signing
