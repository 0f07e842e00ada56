// Blocking Beast client used by the server tests.
#include "http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace tandem::test {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

tcp::socket connect(net::io_context& ioc, uint16_t port) {
  tcp::socket s(ioc);
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  return s;
}

HttpResult result_of(http::response<http::string_body> res) {
  HttpResult r;
  r.status = int(res.result_int());
  r.body = res.body();
  for (const auto& f : res) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    r.headers[name] = std::string(f.value());
  }
  return r;
}

http::request<http::string_body> make_request(const std::string& method, const std::string& target,
                                              const std::string& body, const Headers& headers) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  return req;
}

}  // namespace

HttpResult http_request(uint16_t port, const std::string& method, const std::string& target, const std::string& body,
                        const Headers& headers) {
  net::io_context ioc;
  tcp::socket s = connect(ioc, port);
  // A server that died (e.g. its model failed to load) must fail the test, not hang it.
  timeval tv{60, 0};
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto req = make_request(method, target, body, headers);
  beast::error_code ec;
  http::write(s, req, ec);  // a 413 may arrive before the whole body went out; read it anyway
  beast::flat_buffer buf;
  http::response_parser<http::string_body> p;
  p.body_limit(boost::none);
  http::read(s, buf, p);
  HttpResult r = result_of(p.release());
  s.shutdown(tcp::socket::shutdown_both, ec);
  return r;
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

struct OpenRequest::Impl {
  net::io_context ioc;
  tcp::socket s{ioc};
};

OpenRequest::OpenRequest(uint16_t port, const std::string& target, const std::string& body, const Headers& headers)
    : impl_(std::make_unique<Impl>()) {
  impl_->s = connect(impl_->ioc, port);
  timeval tv{60, 0};
  ::setsockopt(impl_->s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  http::write(impl_->s, make_request("POST", target, body, headers));
}

OpenRequest::~OpenRequest() { close(); }

bool OpenRequest::read_more() {
  char buf[4096];
  beast::error_code ec;
  size_t n = impl_->s.read_some(net::buffer(buf), ec);
  if (ec) return false;
  got_.append(buf, n);
  return true;
}

std::string OpenRequest::header(const std::string& name) {
  while (got_.find("\r\n\r\n") == std::string::npos)
    if (!read_more()) return "";
  std::string head = got_.substr(0, got_.find("\r\n\r\n") + 2);
  std::transform(head.begin(), head.end(), head.begin(), ::tolower);
  size_t p = head.find("\r\n" + name + ":");
  if (p == std::string::npos) return "";
  p += name.size() + 3;
  size_t end = head.find("\r\n", p);
  std::string v = got_.substr(p, end - p);  // the value as sent, not lower-cased
  v.erase(0, v.find_first_not_of(' '));
  return v;
}

bool OpenRequest::read_events(int n) {
  auto count = [&] {
    int k = 0;
    for (size_t p = got_.find("data: "); p != std::string::npos; p = got_.find("data: ", p + 1)) ++k;
    return k;
  };
  while (count() < n)
    if (!read_more()) return false;
  return true;
}

void OpenRequest::close() {
  beast::error_code ec;
  if (impl_->s.is_open()) impl_->s.close(ec);
}

std::string read_then_disconnect(uint16_t port, const std::string& target, const std::string& body,
                                 const Headers& headers, int min_events) {
  OpenRequest r(port, target, body, headers);
  r.read_events(min_events);
  r.close();
  return r.received();
}

void send_then_disconnect(uint16_t port, const std::string& target, const std::string& body, const Headers& headers,
                          int wait_ms) {
  OpenRequest r(port, target, body, headers);
  std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  r.close();
}

ContinueResult request_expect_continue(uint16_t port, const std::string& method, const std::string& target,
                                       const std::string& body, const Headers& headers) {
  net::io_context ioc;
  tcp::socket s = connect(ioc, port);
  // A server that never answers the header must fail the test, not hang it (curl waits 1 s, then
  // sends the body anyway; this client does not, so the missing 100 shows).
  timeval tv{10, 0};
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto req = make_request(method, target, body, headers);
  req.set(http::field::expect, "100-continue");
  http::request_serializer<http::string_body> sr{req};
  http::write_header(s, sr);
  ContinueResult out;
  std::string got;
  char buf[4096];
  beast::error_code ec;
  while (got.find("\r\n\r\n") == std::string::npos) {
    size_t n = s.read_some(net::buffer(buf), ec);
    if (ec) break;
    got.append(buf, n);
  }
  size_t end = got.find("\r\n\r\n");
  if (end == std::string::npos) {
    out.interim = got;  // nothing complete came back
    return out;
  }
  out.interim = got.substr(0, end + 4);
  beast::flat_buffer fb;
  if (out.interim.rfind("HTTP/1.1 100", 0) == 0) {
    got.erase(0, end + 4);
    net::write(s, net::buffer(req.body()), ec);
  }
  auto dst = fb.prepare(got.size());
  std::memcpy(dst.data(), got.data(), got.size());
  fb.commit(got.size());
  http::response_parser<http::string_body> p;
  p.body_limit(boost::none);
  http::read(s, fb, p, ec);
  if (!ec) out.final = result_of(p.release());
  s.shutdown(tcp::socket::shutdown_both, ec);
  return out;
}

}  // namespace tandem::test
