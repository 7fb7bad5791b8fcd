// The constants of the signed model manifest (docs/formats/model-manifest.md): an in-toto v1
// statement listing every file of a model version with its SHA-256, in a DSSE envelope signed
// with Ed25519.
#pragma once

#include <string_view>

namespace pillar::signing {

// The envelope's file name inside the version directory; it is not itself listed.
inline constexpr std::string_view kManifestFile = "model.sig.json";
// What PublishAtomically leaves beside the manifest when a signing is cut short by a crash
// ("model.sig.json.tmp.<random>"): never listed, copied, or used, and verification passes over
// such files, so a crash while re-signing a version does not take the version out of service.
inline constexpr std::string_view kManifestTempPrefix = "model.sig.json.tmp";

// Whether `name` (a path within the version) is the manifest's temporary file.
inline bool IsManifestTempFile(std::string_view name) {
  return name.starts_with(kManifestTempPrefix) && name.find('/') == std::string_view::npos;
}
inline constexpr std::string_view kPayloadType = "application/vnd.in-toto+json";
inline constexpr std::string_view kStatementType = "https://in-toto.io/Statement/v1";
inline constexpr std::string_view kPredicateType = "https://pillar.dev/model-manifest/v1";
// DSSE's pre-authentication encoding prefix.
inline constexpr std::string_view kPaePrefix = "DSSEv1";
inline constexpr size_t kMaxManifestBytes = 16 << 20;
inline constexpr size_t kMaxFiles = 100'000;

}  // namespace pillar::signing
