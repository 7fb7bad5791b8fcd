// The check digits that make a number an identifier rather than any number: the recognizers
// accept a candidate only when its digits pass. Each takes the digits alone (separators already
// removed) as ASCII '0'..'9' (IBAN: also 'A'..'Z').
#pragma once

#include <string_view>

namespace pillar::guard {

// ISO/IEC 7812 (Luhn) over the whole number, its last digit the check digit.
bool LuhnValid(std::string_view digits);
// ISO 13616 / ISO 7064 mod 97-10: the country code and check digits moved to the end, letters
// as 10..35, the whole number mod 97 equal to 1. `iban` is upper case, no spaces.
bool IbanChecksumValid(std::string_view iban);
// Brazil's CPF: 11 digits, two mod-11 check digits; eleven equal digits are not a CPF.
bool CpfValid(std::string_view digits);
// Brazil's CNPJ: 14 digits, two mod-11 check digits with weights 2..9 from the right.
bool CnpjValid(std::string_view digits);
// Portugal's NIF: 9 digits, a first digit (or two) from the assigned ranges, a mod-11 check
// digit.
bool NifValid(std::string_view digits);
// The US Social Security Number's structure (there is no check digit): area not 000, 666 or
// 900-999, group not 00, serial not 0000.
bool SsnStructureValid(std::string_view digits);

}  // namespace pillar::guard
