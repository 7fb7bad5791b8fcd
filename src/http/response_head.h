// Internal to src/http: the head of a response as a session writes it. By hand, not by Beast's
// generic serializer: pillar's responses are a status line, a handful of headers and a sized
// body, and the serializer cost more than the rest of a cheap request.
#pragma once

#include <string>

#include "http/message.h"

namespace pillar::http::internal {

// How the response's body is framed on its connection.
struct ResponseFraming {
  bool streamed = false;   // no length is known: chunked, or to the close for HTTP/1.0
  bool keep_alive = true;  // false: "Connection: close"
  bool http10 = false;     // the request was HTTP/1.0
};

// Appends the status line, Server, Content-Type, the framing headers, `response.headers` and
// the blank line to `head`. Header names and values come from pillar's own code; CR and LF in
// them are dropped all the same, so no value can end the head or add a header.
void AppendResponseHead(const Response& response, ResponseFraming framing, std::string& head);

}  // namespace pillar::http::internal
