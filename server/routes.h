// What the route handlers share: the server state, the request/reply types and the connection
// helpers that streaming routes write through. Internal to server/.
// Owner: HttpServer::Impl owns the ServerState. Thread: handlers run on the io thread only.
// Sync: `phase` and `active_requests` are atomics because drain() and the loader read or set them
// from other threads; everything else is written before phase becomes ready.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "http_server.h"
#include "openai_json.h"

namespace tandem::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Request = http::request<http::string_body>;

enum class Phase { loading, ready, draining, failed };

struct ServerState {
  ServerOptions options;
  Metrics metrics{""};
  std::atomic<Phase> phase{Phase::loading};
  LoadedModel loaded;
  std::unique_ptr<SlotScheduler> scheduler;
  std::string model_name;     // the served name
  std::string fingerprint;    // system_fingerprint
  int64_t created = 0;        // load time, unix seconds
  std::atomic<int> active_requests{0};  // generation requests not yet answered in full
  std::atomic<double> load_progress{0};  // fraction of the model loaded, for /health
};

// The server's defaults for a chat request that leaves them out (reasoning_effort), written into
// the request so every route renders the same prompt.
void apply_chat_defaults(const ServerState& s, rapidjson::Document& request);

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

Reply error_reply(const ApiError& e);
Reply json_reply(std::string body);

// A client connection, as the streaming routes see it.
class Connection {
 public:
  Connection(beast::tcp_stream& stream, ServerState& state) : stream_(stream), state_(state) {}
  // Writes a whole response; false when the client is gone.
  // Callers pass named objects, never temporaries: GCC 12 may destroy a temporary in a co_await
  // expression twice.
  net::awaitable<bool> send(const Request& req, const Reply& reply, const std::string& request_id);
  // SSE over chunked transfer encoding.
  net::awaitable<bool> start_sse(const Request& req, const std::string& request_id);
  net::awaitable<bool> sse_data(const std::string& json);   // `data: <json>\n\n`
  net::awaitable<bool> sse_raw(std::string_view text);      // comments, [DONE]
  net::awaitable<bool> end_sse();
  // The peer closed or reset the connection (a zero-byte peek; no data is consumed).
  bool peer_closed();
  // Calls `on_close` on the io thread as soon as the peer closes or resets the connection, so a
  // request is cancelled when its client leaves rather than at the next poll. The watch ends at
  // unwatch() or when the peer sends data instead (a pipelined request: peer_closed() polls cover
  // the rest). One watch at a time; a new one replaces the old.
  void watch_close(std::function<void()> on_close);
  void unwatch();
  ~Connection() { unwatch(); }

 private:
  net::awaitable<bool> write_chunk(std::string_view text);
  beast::tcp_stream& stream_;
  ServerState& state_;
  std::shared_ptr<bool> watching_;  // the current watch is live; shared with its wait's handler
};

// Routes that answer at once (routes_info.cpp). `query` is the part after '?'.
Reply route_health(ServerState& s);
Reply route_models(ServerState& s);
// GET /v1/models/{id}: the list's object for the served name or an alias; 404 model_not_found else.
Reply route_model(ServerState& s, const std::string& id);
Reply route_metrics(ServerState& s);
Reply route_tokenize(ServerState& s, const std::string& body);
Reply route_detokenize(ServerState& s, const std::string& body);
Reply route_apply_template(ServerState& s, const std::string& body);
Reply route_slots(ServerState& s, const std::string& query);
Reply route_props(ServerState& s);

// /v1/chat/completions and /v1/completions (routes_generate.cpp). Returns whether the connection
// may be kept alive. Throws ApiError for requests refused before anything was written.
net::awaitable<bool> route_generate(ServerState& s, Connection& c, const Request& req, bool chat,
                                    const std::string& request_id);

}  // namespace tandem::server
