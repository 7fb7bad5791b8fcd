// How clients print a JSON number, for screens that must read it as a reader of the client's
// output would: JavaScript (openai-node) and Python (openai-python) print some numbers with
// other digits than the text the number was written as.
#pragma once

#include <simdjson.h>

#include <string>

namespace pillar::protocol {

// A number as clients show it: a whole number written with an exponent or a fraction
// (4.111111111111111e15, 12345678909.0) as JavaScript prints it, the shortest digits that read
// back as the same double, then zeros (4.111111111111117e18 is 4111111111111117000, not the
// double's exact 4111111111111116800; Python's float shows the same digits); an integer past
// 2^53, which JavaScript reads as the nearest double, both as written and as JavaScript prints
// it ("4242424242424240001 4242424242424240000"), since Python keeps the integer. Any other as
// written (simdjson::minify). A fraction below 1e21 (and from 1e-6) in plain notation, the
// shortest digits that read back as the same double, as JavaScript prints it.
std::string NumberText(simdjson::dom::element e);

}  // namespace pillar::protocol
