#include "http/response_head.h"

#include <boost/beast/http.hpp>
#include <string_view>

#include "common/strings.h"

namespace pillar::http::internal {
namespace {

// A line break in a value would end the header early (response splitting): it is dropped. Values
// have none, so each is copied whole, not a character at a time.
void AppendHeaderValue(std::string_view value, std::string& head) {
  size_t run = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '\r' || value[i] == '\n') {
      head.append(value.data() + run, i - run);
      run = i + 1;
    }
  }
  head.append(value.data() + run, value.size() - run);
}

}  // namespace

void AppendResponseHead(const Response& response, ResponseFraming framing, std::string& head) {
  namespace bhttp = boost::beast::http;
  const auto reason = bhttp::obsolete_reason(bhttp::int_to_status(unsigned(response.status)));
  StrAppend(&head, "HTTP/1.1 ", response.status, " ",
            std::string_view(reason.data(), reason.size()), "\r\nServer: pillar\r\nContent-Type: ");
  AppendHeaderValue(response.content_type, head);
  if (!framing.streamed) {
    StrAppend(&head, "\r\nContent-Length: ", response.body.size(), "\r\n");
  } else if (!framing.http10) {
    head.append("\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache\r\n");
  } else {
    head.append("\r\nCache-Control: no-cache\r\n");
  }
  for (const auto& [name, value] : response.headers) {
    AppendHeaderValue(name, head);
    head.append(": ");
    AppendHeaderValue(value, head);
    head.append("\r\n");
  }
  if (!framing.keep_alive) {
    head.append("Connection: close\r\n");
  } else if (framing.http10) {
    head.append("Connection: keep-alive\r\n");
  }
  head.append("\r\n");
}

}  // namespace pillar::http::internal
