// The kinds of sensitive data the guard recognizes, named as Microsoft Presidio names them where
// Presidio has the type (EMAIL_ADDRESS, CREDIT_CARD, ...), so findings read the same to people
// who know that tool, and what a recognizer found in a text.
//
//   std::string_view name = EntityName(EntityType::kCreditCard);   // "CREDIT_CARD"
//   std::optional<EntityType> type = ParseEntityName("BR_CPF");
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pillar::guard {

enum class EntityType {
  kEmailAddress,
  kPhoneNumber,
  kCreditCard,
  kIbanCode,
  kIpAddress,
  kUsSsn,
  kBrCpf,
  kBrCnpj,
  kPtNif,
  kSecret,  // credentials: cloud access keys, private key blocks, JWTs, tokens, pillar keys
};

inline constexpr std::array<EntityType, 10> kAllEntityTypes = {
    EntityType::kEmailAddress, EntityType::kPhoneNumber, EntityType::kCreditCard,
    EntityType::kIbanCode,     EntityType::kIpAddress,   EntityType::kUsSsn,
    EntityType::kBrCpf,        EntityType::kBrCnpj,      EntityType::kPtNif,
    EntityType::kSecret};

std::string_view EntityName(EntityType type);
std::optional<EntityType> ParseEntityName(std::string_view name);

// One entity found in a text: bytes [begin, end), a confidence in [0, 1], and for secrets the
// kind of credential ("aws_access_key", "private_key", "jwt", ...); empty otherwise. Where
// findings overlapped, they were merged into one over all their bytes: `type` is the one
// scored highest, and `overlapped` has a bit (1 << type) for each of the others, so that the
// strictest action of them all applies to every byte (an e-mail address glued to a private key
// must not carry the key out with it).
struct Finding {
  EntityType type;
  size_t begin = 0;
  size_t end = 0;
  double score = 0;
  std::string_view kind;  // a static string
  uint32_t overlapped = 0;
};

}  // namespace pillar::guard
