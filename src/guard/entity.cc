#include "guard/entity.h"

namespace pillar::guard {

std::string_view EntityName(EntityType type) {
  switch (type) {
    case EntityType::kEmailAddress:
      return "EMAIL_ADDRESS";
    case EntityType::kPhoneNumber:
      return "PHONE_NUMBER";
    case EntityType::kCreditCard:
      return "CREDIT_CARD";
    case EntityType::kIbanCode:
      return "IBAN_CODE";
    case EntityType::kIpAddress:
      return "IP_ADDRESS";
    case EntityType::kUsSsn:
      return "US_SSN";
    case EntityType::kBrCpf:
      return "BR_CPF";
    case EntityType::kBrCnpj:
      return "BR_CNPJ";
    case EntityType::kPtNif:
      return "PT_NIF";
    case EntityType::kSecret:
      return "SECRET";
  }
  return "UNKNOWN";
}

std::optional<EntityType> ParseEntityName(std::string_view name) {
  for (EntityType type : kAllEntityTypes) {
    if (EntityName(type) == name) return type;
  }
  return std::nullopt;
}

}  // namespace pillar::guard
