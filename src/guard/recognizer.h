// The personal-data and secret recognizers: one pass over a text finds e-mail addresses, phone
// numbers (E.164, and national forms for the US, Brazil and Portugal), payment cards (Luhn),
// IBANs (mod 97), IPv4 and IPv6 addresses, US SSNs, Brazilian CPFs and CNPJs and Portuguese
// NIFs (check digits), and credentials (cloud access keys, private key blocks, JWTs, API tokens,
// pillar's own keys). A candidate is accepted only when it validates (a check digit, a known
// country length, an address that parses), and scored by how strongly its form says what it is,
// raised or lowered by context words near it ("CPF:", "telefone", "order #").
//
//   std::vector<Finding> found = Recognize(text, {});
//   for (const Finding& f : found) ... EntityName(f.type), f.begin, f.end, f.score ...
//
// No regular-expression engine: each recognizer is a small scanner over the bytes, so a text is
// read once at hundreds of MB/s and no pattern can backtrack. Findings are sorted by position
// and never overlap (where two recognizers claim the same bytes the higher score wins). The
// text is any bytes; invalid UTF-8 is read as bytes that belong to no entity.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "guard/entity.h"

namespace pillar::guard {

struct RecognizerOptions {
  // Findings scored below this are dropped. Presidio's default is 0; most deployments raise it.
  double min_score = 0.5;
  // The types looked for, indexed by EntityType.
  std::array<bool, kAllEntityTypes.size()> enabled = {true, true, true, true, true,
                                                      true, true, true, true, true};
};

std::vector<Finding> Recognize(std::string_view text, const RecognizerOptions& options);

}  // namespace pillar::guard
