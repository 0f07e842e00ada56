// A small blocking HTTP/1.1 client for the server tests (Boost.Beast), with a raw SSE reader.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

struct HttpResult {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased
};

using Headers = std::vector<std::pair<std::string, std::string>>;

HttpResult http_request(uint16_t port, const std::string& method, const std::string& target,
                        const std::string& body = "", const Headers& headers = {});

// The `data:` payloads of an SSE body, in order ("[DONE]" included), and the comment lines seen.
std::vector<std::string> sse_events(const std::string& body);

// A request whose connection the test closes when it chooses: a client that leaves at a known
// moment (queued, prefilling, decoding). Reads time out after 60 s so a dead server fails the test.
class OpenRequest {
 public:
  OpenRequest(uint16_t port, const std::string& target, const std::string& body, const Headers& headers);
  ~OpenRequest();  // closes
  OpenRequest(const OpenRequest&) = delete;
  OpenRequest& operator=(const OpenRequest&) = delete;
  // Reads until the response's header block arrived; returns that header's value ("" if absent or
  // the connection ended first). Name lower-case.
  std::string header(const std::string& name);
  // Reads until `n` SSE `data:` lines arrived in all; false if the stream ended first.
  bool read_events(int n);
  const std::string& received() const { return got_; }
  void close();

 private:
  bool read_more();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string got_;
};

// Sends a request and reads raw bytes until `min_events` SSE `data:` lines arrived (or the stream
// ended), then closes the socket: a client that walks away mid-stream. Returns the bytes read.
std::string read_then_disconnect(uint16_t port, const std::string& target, const std::string& body,
                                 const Headers& headers, int min_events);

// Sends a request and closes the socket after `wait_ms` without reading the answer.
void send_then_disconnect(uint16_t port, const std::string& target, const std::string& body, const Headers& headers,
                          int wait_ms);

// A request sent as a client that honours `Expect: 100-continue`: the header first, then it waits
// (up to 10 s) for the server's first response. `interim` is that response's header block; the body
// goes out only if it is `100 Continue`, and `final` is the answer after it (or the first response
// itself when that was not a 100).
struct ContinueResult {
  std::string interim;
  HttpResult final;
};
ContinueResult request_expect_continue(uint16_t port, const std::string& method, const std::string& target,
                                       const std::string& body, const Headers& headers = {});

}  // namespace tandem::test
