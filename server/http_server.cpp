// The listener, one coroutine per connection, routing and auth, the SSE writer, the background
// model load and the drain on SIGTERM/SIGINT.
#include "http_server.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <filesystem>
#include <sys/socket.h>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <spdlog/spdlog.h>

#include "routes.h"
#include "tandem/error.h"
#include "tandem/registry.h"
#include "tandem/text/text_codec.h"

namespace tandem::server {

using tcp = net::ip::tcp;
using net::use_awaitable;

namespace {

constexpr auto kIdleTimeout = std::chrono::seconds(120);   // a kept-alive connection with no request
constexpr auto kWriteTimeout = std::chrono::seconds(60);   // a client that stops reading its response

// Equal without an early exit, so the time taken does not tell how much of a key matched.
bool same_key(const std::string& a, const std::string& b) {
  unsigned char d = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i % (b.size() ? b.size() : 1)]);
  return d == 0;
}

bool key_ok(const std::vector<std::string>& keys, const Request& req) {
  std::string given;
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    std::string v(it->value());
    if (v.rfind("Bearer ", 0) == 0) given = v.substr(7);
  }
  if (given.empty())
    if (auto it = req.find("x-api-key"); it != req.end()) given = std::string(it->value());
  bool ok = false;
  for (const auto& k : keys) ok |= same_key(given, k);
  return ok;
}

bool expects_continue(const Request& req) {
  auto it = req.find(http::field::expect);
  return req.version() >= 11 && it != req.end() && beast::iequals(it->value(), "100-continue");
}

ApiError invalid_key() {
  return ApiError{401, "authentication_error", "invalid_api_key", "", "Invalid API key", {}};
}

enum class RouteId { chat, completions, models, model, health, metrics, tokenize, detokenize, apply_template, slots, props };

struct Route {
  const char* path;
  http::verb verb;
  RouteId id;
};

const Route kRoutes[] = {
    {"/v1/chat/completions", http::verb::post, RouteId::chat},
    {"/v1/completions", http::verb::post, RouteId::completions},
    {"/v1/models", http::verb::get, RouteId::models},
    {"/models", http::verb::get, RouteId::models},
    {"/health", http::verb::get, RouteId::health},
    {"/v1/health", http::verb::get, RouteId::health},
    {"/metrics", http::verb::get, RouteId::metrics},
    {"/tokenize", http::verb::post, RouteId::tokenize},
    {"/detokenize", http::verb::post, RouteId::detokenize},
    {"/apply-template", http::verb::post, RouteId::apply_template},
    {"/slots", http::verb::get, RouteId::slots},
    {"/props", http::verb::get, RouteId::props},
};

// GET /v1/models/{id} (and /models/{id}): the id is the rest of the path, percent-decoded, since a
// served name may hold a '/' (org/model) that clients send as is or as %2F.
const char* const kModelPrefixes[] = {"/v1/models/", "/models/"};

std::string percent_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); };
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) && hex(s[i + 2])) {
      out += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string drafter_label(const DraftOptions& d) {
  std::string s;
  for (const auto& n : d.drafters) s += (s.empty() ? "" : ",") + n;
  return s.empty() ? "none" : s;
}

std::string fingerprint(const LoadedModel& m) {
  // FNV-1a over what identifies the weights cheaply: file, format and size.
  std::string id = m.path + "|" + m.model->format_name() + "|" + std::to_string(m.model->weight_bytes());
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  char b[9];
  std::snprintf(b, sizeof b, "%08x", unsigned(h ^ (h >> 32)));
  return std::string("tandem-") + TANDEM_VERSION + "-" + b;
}

}  // namespace

Reply error_reply(const ApiError& e) {
  Reply r;
  r.status = e.status;
  r.body = error_body(e);
  r.headers = e.headers;
  return r;
}

Reply json_reply(std::string body) {
  Reply r;
  r.body = std::move(body);
  return r;
}

// ---- Connection ----

net::awaitable<bool> Connection::send(const Request& req, const Reply& reply, const std::string& request_id) {
  http::response<http::string_body> res{http::status(reply.status), req.version()};
  res.set(http::field::server, std::string("tandem/") + TANDEM_VERSION);
  res.set(http::field::content_type, reply.content_type);
  res.set("x-request-id", request_id);
  for (const auto& [k, v] : reply.headers) res.set(k, v);
  res.keep_alive(req.keep_alive());
  res.body() = reply.body;
  res.prepare_payload();
  state_.metrics.http_response(reply.status);
  beast::error_code ec;
  stream_.expires_after(kWriteTimeout);
  co_await http::async_write(stream_, res, net::redirect_error(use_awaitable, ec));
  stream_.expires_never();
  co_return !ec;
}

net::awaitable<bool> Connection::start_sse(const Request& req, const std::string& request_id) {
  http::response<http::empty_body> res{http::status::ok, req.version()};
  res.set(http::field::server, std::string("tandem/") + TANDEM_VERSION);
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-cache");
  res.set("x-request-id", request_id);
  res.keep_alive(req.keep_alive());
  res.chunked(true);
  state_.metrics.http_response(200);
  http::response_serializer<http::empty_body> sr{res};
  beast::error_code ec;
  stream_.expires_after(kWriteTimeout);
  co_await http::async_write_header(stream_, sr, net::redirect_error(use_awaitable, ec));
  stream_.expires_never();
  co_return !ec;
}

net::awaitable<bool> Connection::write_chunk(std::string_view text) {
  beast::error_code ec;
  stream_.expires_after(kWriteTimeout);
  auto chunk = http::make_chunk(net::buffer(text.data(), text.size()));
  co_await net::async_write(stream_, chunk, net::redirect_error(use_awaitable, ec));
  stream_.expires_never();
  co_return !ec;
}

net::awaitable<bool> Connection::sse_data(const std::string& json) {
  std::string event = "data: " + json + "\n\n";
  co_return co_await write_chunk(event);
}

net::awaitable<bool> Connection::sse_raw(std::string_view text) { co_return co_await write_chunk(text); }

net::awaitable<bool> Connection::end_sse() {
  beast::error_code ec;
  stream_.expires_after(kWriteTimeout);
  auto last = http::make_chunk_last();
  co_await net::async_write(stream_, last, net::redirect_error(use_awaitable, ec));
  stream_.expires_never();
  co_return !ec;
}

bool Connection::peer_closed() {
  char c;
  ssize_t n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

void Connection::watch_close(std::function<void()> on_close) {
  unwatch();
  watching_ = std::make_shared<bool>(true);
  // The wait is never cancelled (that would cancel the connection's other operations too): a
  // finished watch's handler sees its flag down and returns without touching the connection.
  stream_.socket().async_wait(tcp::socket::wait_read,
                              [this, live = watching_, on_close = std::move(on_close)](beast::error_code ec) {
                                if (ec || !*live) return;
                                *live = false;
                                if (peer_closed()) on_close();
                              });
}

void Connection::unwatch() {
  if (watching_) *watching_ = false;
  watching_.reset();
}

// ---- the server ----

struct HttpServer::Impl {
  ServerState state;        // declared before the io_context: connection coroutines die first
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::unique_ptr<net::signal_set> signals;
  ModelLoader loader;
  std::thread io_thread, load_thread;
  std::atomic<int> exit_code{0};
  uint16_t port = 0;

  net::awaitable<void> accept_loop();
  net::awaitable<void> session(tcp::socket socket);
  net::awaitable<bool> dispatch(Connection& c, const Request& req, const std::string& request_id);
  net::awaitable<void> linger_close(beast::tcp_stream& stream);
  void load();
  void begin_drain();
  void arm_signals() {
    // The first signal drains; a later one cancels at once (begin_drain tells them apart).
    signals->async_wait([this](const beast::error_code& ec, int) {
      if (ec) return;
      begin_drain();
      arm_signals();
    });
  }
  net::awaitable<void> drain_wait();
};

net::awaitable<void> HttpServer::Impl::accept_loop() {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(net::redirect_error(use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open()) co_return;  // closed by the drain
      spdlog::warn("accept: {}", ec.message());
      continue;
    }
    net::co_spawn(ioc, session(std::move(socket)), net::detached);
  }
}

net::awaitable<void> HttpServer::Impl::linger_close(beast::tcp_stream& stream) {
  // After an early error reply the client may still be sending its body; closing with unread data
  // would reset the connection and lose the reply, so read and drop it for a moment first.
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.expires_after(std::chrono::seconds(2));
  static char sink[16384];
  for (size_t total = 0; total < (size_t(64) << 20);) {
    size_t n = co_await stream.async_read_some(net::buffer(sink), net::redirect_error(use_awaitable, ec));
    if (ec) break;
    total += n;
  }
  stream.socket().close(ec);
}

net::awaitable<void> HttpServer::Impl::session(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  Connection conn(stream, state);
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(state.options.max_body_bytes);
    parser.header_limit(64 * 1024);
    beast::error_code ec;
    stream.expires_after(kIdleTimeout);
    // The header first: an over-limit Content-Length fails here (body_limit) before any of the body
    // is read, and a client that sent `Expect: 100-continue` waits for our 100 before sending it.
    co_await http::async_read_header(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
    if (!ec && !parser.is_done()) {
      if (expects_continue(parser.get())) {
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        co_await http::async_write(stream, go_on, net::redirect_error(use_awaitable, ec));
      }
      if (!ec) co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
    }
    stream.expires_never();
    std::string request_id = random_id("req-");
    if (ec == http::error::body_limit || ec == http::error::header_limit) {
      // Answer with a minimal request: the parsed header is not complete enough to reuse.
      Request req{http::verb::post, "/", 11};
      req.keep_alive(false);
      ApiError e{413, "invalid_request_error", "request_too_large", "",
                 ec == http::error::body_limit
                     ? "request body exceeds " + std::to_string(state.options.max_body_bytes) + " bytes (--max-body-bytes)"
                     : "request header exceeds 65536 bytes",
                 {}};
      Reply reply = error_reply(e);
      co_await conn.send(req, reply, request_id);
      co_await linger_close(stream);
      co_return;
    }
    if (ec) {
      // Parse errors get a 400; a closed, reset or timed-out connection just ends.
      if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
          ec != http::error::end_of_stream && ec != http::error::partial_message) {
        Request req{http::verb::post, "/", 11};
        req.keep_alive(false);
        Reply reply = error_reply(bad_request("invalid_request", "", "malformed HTTP request: " + ec.message()));
        co_await conn.send(req, reply, request_id);
        co_await linger_close(stream);
      }
      break;
    }
    Request req = parser.release();
    bool keep = co_await dispatch(conn, req, request_id);
    if (!keep || !req.keep_alive() || state.phase.load() == Phase::draining) break;
  }
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.socket().close(ec);
}

net::awaitable<bool> HttpServer::Impl::dispatch(Connection& c, const Request& req, const std::string& request_id) {
  std::string target(req.target());
  size_t q = target.find('?');
  std::string path = target.substr(0, q), query = q == std::string::npos ? "" : target.substr(q + 1);
  const Route* route = nullptr;
  bool path_known = false;
  for (const Route& r : kRoutes)
    if (path == r.path) {
      path_known = true;
      if (req.method() == r.verb) route = &r;
    }
  static const Route kModelRoute{"/v1/models/{id}", http::verb::get, RouteId::model};
  std::string model_id;
  for (const char* prefix : kModelPrefixes)
    if (!path_known && path.rfind(prefix, 0) == 0 && path.size() > std::strlen(prefix)) {
      path_known = true;
      model_id = percent_decode(path.substr(std::strlen(prefix)));
      if (req.method() == http::verb::get) route = &kModelRoute;
    }
  std::optional<ApiError> refuse;
  Reply reply;
  if (!path_known) {
    refuse = ApiError{404, "not_found_error", "route_not_found", "", "no route " + path, {}};
  } else if (!route) {
    refuse = ApiError{405, "invalid_request_error", "method_not_allowed", "",
                      "method " + std::string(req.method_string()) + " is not allowed on " + path, {}};
    for (const Route& r : kRoutes)
      if (path == r.path) refuse->headers.emplace_back("Allow", std::string(http::to_string(r.verb)));
    if (!model_id.empty()) refuse->headers.emplace_back("Allow", "GET");
  }
  const Phase phase = state.phase.load();
  if (!refuse && route->id != RouteId::health) {
    bool key_needed = route->id == RouteId::metrics ? !state.options.metrics_key.empty() : !state.options.api_keys.empty();
    const auto& keys = route->id == RouteId::metrics ? std::vector<std::string>{state.options.metrics_key}
                                                     : state.options.api_keys;
    if (key_needed && !key_ok(keys, req)) refuse = invalid_key();
    else if (phase == Phase::loading || phase == Phase::failed) {
      state.metrics.refused("loading");
      refuse = unavailable("loading", phase == Phase::loading ? "Loading model" : "the model failed to load", 5);
    } else if (phase == Phase::draining) {
      // New requests during the grace period get a 503 the client can retry elsewhere; /health
      // answers its own 503 {"status":"draining"} below.
      state.metrics.refused("draining");
      refuse = unavailable("draining", "the server is shutting down", 30);
    }
  }
  if (refuse) {
    reply = error_reply(*refuse);
    co_return co_await c.send(req, reply, request_id);
  }

  try {
    switch (route->id) {
      case RouteId::chat:
      case RouteId::completions:
        co_return co_await route_generate(state, c, req, route->id == RouteId::chat, request_id);
      case RouteId::models: reply = route_models(state); break;
      case RouteId::model: reply = route_model(state, model_id); break;
      case RouteId::health: reply = route_health(state); break;
      case RouteId::metrics: reply = route_metrics(state); break;
      case RouteId::tokenize: reply = route_tokenize(state, req.body()); break;
      case RouteId::detokenize: reply = route_detokenize(state, req.body()); break;
      case RouteId::apply_template: reply = route_apply_template(state, req.body()); break;
      case RouteId::slots: reply = route_slots(state, query); break;
      case RouteId::props: reply = route_props(state); break;
    }
  } catch (const ApiError& e) {
    reply = error_reply(e);
  } catch (const RequestError& e) {
    reply = error_reply(api_error(e));
  } catch (const std::exception& e) {
    spdlog::error("request {}: {}", request_id, e.what());
    reply = error_reply(ApiError{500, "server_error", "internal_error", "", e.what(), {{"x-should-retry", "false"}}});
  }
  co_return co_await c.send(req, reply, request_id);
}

void HttpServer::Impl::load() {
  try {
    auto t0 = Clock::now();
    spdlog::info("loading model…");
    LoadedModel m = loader([this](double f) {
      state.load_progress = f;
      if (state.options.on_progress) state.options.on_progress(f);
    });
    check(m.model && m.codec, "the model loader returned no model or no text codec");
    state.loaded = std::move(m);
    const Model& model = *state.loaded.model;
    std::string name = state.options.served_model_name;
    if (name.empty()) name = std::filesystem::path(state.loaded.path).filename().string();
    if (name.empty()) name = std::filesystem::path(state.loaded.path).parent_path().filename().string();
    state.model_name = name;
    state.fingerprint = fingerprint(state.loaded);
    state.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    state.metrics.set_model_name(name);
    state.metrics.set_engine_info({{"version", TANDEM_VERSION},
                                   {"model", name},
                                   {"weights", model.format_name()},
                                   {"drafter", drafter_label(state.options.scheduler.draft)},
                                   {"window", std::to_string(state.options.scheduler.context)},
                                   {"slots", std::to_string(state.options.scheduler.slots)}});
    state.scheduler = std::make_unique<SlotScheduler>(*state.loaded.model, state.loaded.codec, state.metrics,
                                                  state.options.scheduler, state.loaded.registry.get());
    Phase expected = Phase::loading;
    state.phase.compare_exchange_strong(expected, Phase::ready);
    spdlog::info("model '{}' loaded in {:.1f} s ({:.1f} MiB of weights); serving on http://{}:{}", name,
                 std::chrono::duration<double>(Clock::now() - t0).count(), double(model.weight_bytes()) / (1 << 20),
                 state.options.host, port);
  } catch (const std::exception& e) {
    spdlog::error("loading the model failed: {}", e.what());
    state.phase = Phase::failed;
    exit_code = 1;
    net::post(ioc, [this] { ioc.stop(); });
  }
}

void HttpServer::Impl::begin_drain() {
  if (state.phase.load() == Phase::draining) {
    // A second signal: do not wait for the grace period.
    spdlog::warn("second stop request: cancelling running requests");
    if (state.scheduler) state.scheduler->cancel_all();
    return;
  }
  state.phase = Phase::draining;
  // The listener stays open for the grace period: a new connection gets a 503 with Retry-After
  // (spec/server.md, Shutdown) rather than a refused connect; drain_wait closes it at the end.
  if (state.scheduler) state.scheduler->close();
  spdlog::info("draining: {} request(s) running, up to {:.0f} s", state.active_requests.load(), state.options.drain_timeout_s);
  net::co_spawn(ioc, drain_wait(), net::detached);
}

net::awaitable<void> HttpServer::Impl::drain_wait() {
  net::steady_timer t(ioc);
  auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(state.options.drain_timeout_s * 1000));
  auto wait_idle = [&](Clock::time_point until) -> net::awaitable<void> {
    while (state.active_requests.load() > 0 && Clock::now() < until) {
      t.expires_after(std::chrono::milliseconds(20));
      beast::error_code ec;
      co_await t.async_wait(net::redirect_error(use_awaitable, ec));
    }
  };
  co_await wait_idle(deadline);
  if (state.active_requests.load() > 0) {
    spdlog::warn("drain timeout: cancelling {} request(s)", state.active_requests.load());
    if (state.scheduler) state.scheduler->cancel_all();
    co_await wait_idle(Clock::now() + std::chrono::seconds(5));
  }
  beast::error_code ec;
  acceptor.close(ec);
  ioc.stop();
}

HttpServer::HttpServer(ServerOptions options, ModelLoader loader) : impl_(std::make_unique<Impl>()) {
  impl_->state.options = std::move(options);
  impl_->loader = std::move(loader);
}

HttpServer::~HttpServer() {
  if (impl_->io_thread.joinable()) {
    drain();
    wait();
  }
}

void HttpServer::start() {
  Impl& im = *impl_;
  const ServerOptions& o = im.state.options;
  beast::error_code ec;
  tcp::endpoint ep(net::ip::make_address(o.host, ec), o.port);
  if (ec) {
    // A host name: bind to what it resolves to, an IPv4 address first (localhost → 127.0.0.1, which
    // is what clients that say "localhost" usually reach first).
    tcp::resolver resolver(im.ioc);
    auto found = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    check(!ec && !found.empty(), "--host '", o.host, "' is neither an IP address nor a host name that resolves: ",
          ec ? ec.message() : "no addresses");
    ep = found.begin()->endpoint();
    for (const auto& e : found)
      if (e.endpoint().address().is_v4()) {
        ep = e.endpoint();
        break;
      }
    spdlog::debug("--host '{}' resolves to {}", o.host, ep.address().to_string());
  }
  const net::ip::address addr = ep.address();
  im.acceptor.open(ep.protocol(), ec);
  if (!ec) im.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(net::socket_base::max_listen_connections, ec);
  check(!ec, "cannot listen on ", o.host, ":", o.port, ": ", ec.message());
  im.port = im.acceptor.local_endpoint().port();
  if (o.api_keys.empty() && !addr.is_loopback())
    spdlog::warn("listening on {} without an API key: anyone who can reach it can use it", o.host);
  if (o.handle_signals) {
    im.signals = std::make_unique<net::signal_set>(im.ioc, SIGINT, SIGTERM);
    im.arm_signals();
  }
  net::co_spawn(im.ioc, im.accept_loop(), net::detached);
  im.io_thread = std::thread([&im] { im.ioc.run(); });
  im.load_thread = std::thread([&im] { im.load(); });
}

uint16_t HttpServer::port() const { return impl_->port; }

void HttpServer::drain() {
  net::post(impl_->ioc, [im = impl_.get()] { im->begin_drain(); });
}

int HttpServer::wait() {
  Impl& im = *impl_;
  if (im.io_thread.joinable()) im.io_thread.join();
  if (im.load_thread.joinable()) im.load_thread.join();
  // The engine must stop before connection coroutines go away with the io_context: it may still
  // post wake-ups to them.
  im.state.scheduler.reset();
  return im.exit_code.load();
}

LoadedModel load_profile_model(const Profile& profile, std::shared_ptr<PluginRegistry> registry,
                               const std::function<void(double)>& progress) {
  LoadedModel m;
  m.registry = std::move(registry);
  std::string format_name;
  std::unique_ptr<Checkpoint> checkpoint = open_checkpoint(profile.load, *m.registry, &format_name);
  m.codec = make_text_codec(profile, *checkpoint);
  LoadOptions o = profile.load;
  o.progress = progress;
  m.model = Model::load(std::move(checkpoint), format_name, o, *m.registry);
  m.path = profile.load.path;
  return m;
}

ModelLoader profile_loader(const Profile& profile) {
  return [profile](const std::function<void(double)>& progress) {
    auto registry = std::make_shared<PluginRegistry>();
    registry->load_default();
    return load_profile_model(profile, std::move(registry), progress);
  };
}

}  // namespace tandem::server
