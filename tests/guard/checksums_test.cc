#include "guard/checksums.h"

#include <gtest/gtest.h>

namespace pillar::guard {
namespace {

TEST(ChecksumsTest, LuhnAcceptsTestCardsAndRefusesAChangedDigit) {
  EXPECT_TRUE(LuhnValid("4111111111111111"));
  EXPECT_TRUE(LuhnValid("5500000000000004"));
  EXPECT_TRUE(LuhnValid("378282246310005"));
  EXPECT_FALSE(LuhnValid("4111111111111112"));
  EXPECT_FALSE(LuhnValid("4111x11111111111"));
  EXPECT_FALSE(LuhnValid("0"));
}

TEST(ChecksumsTest, IbanMod97) {
  EXPECT_TRUE(IbanChecksumValid("PT50000201231234567890154"));
  EXPECT_TRUE(IbanChecksumValid("DE89370400440532013000"));
  EXPECT_TRUE(IbanChecksumValid("GB82WEST12345698765432"));
  EXPECT_FALSE(IbanChecksumValid("DE89370400440532013001"));
  EXPECT_FALSE(IbanChecksumValid("GB82WEST1234569876543!"));
  EXPECT_FALSE(IbanChecksumValid("DE8"));
}

TEST(ChecksumsTest, CpfAndCnpjCheckDigits) {
  EXPECT_TRUE(CpfValid("12345678909"));
  EXPECT_FALSE(CpfValid("12345678908"));
  EXPECT_FALSE(CpfValid("11111111111"));  // passes the arithmetic, never issued
  EXPECT_FALSE(CpfValid("1234567890"));
  EXPECT_TRUE(CnpjValid("11222333000181"));
  EXPECT_FALSE(CnpjValid("11222333000182"));
  EXPECT_FALSE(CnpjValid("00000000000000"));
}

TEST(ChecksumsTest, NifCheckDigitAndAssignedFirstDigits) {
  EXPECT_TRUE(NifValid("123456789"));
  EXPECT_TRUE(NifValid("501964843"));
  EXPECT_FALSE(NifValid("123456788"));
  EXPECT_FALSE(NifValid("401964843"));  // 4 is assigned only as 45
  EXPECT_FALSE(NifValid("12345678"));
}

TEST(ChecksumsTest, SsnStructure) {
  EXPECT_TRUE(SsnStructureValid("078051120"));
  EXPECT_FALSE(SsnStructureValid("000123456"));
  EXPECT_FALSE(SsnStructureValid("666123456"));
  EXPECT_FALSE(SsnStructureValid("900123456"));
  EXPECT_FALSE(SsnStructureValid("123004567"));
  EXPECT_FALSE(SsnStructureValid("123450000"));
}

}  // namespace
}  // namespace pillar::guard
