// Shared setup for the server tests: the tiny fixture model behind an in-process HttpServer on an
// ephemeral port, reference generations from tandem::generate, and a byte-level test codec.
#pragma once
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "http_client.h"
#include "http_server.h"
#include "tandem/backend.h"
#include "tandem/text/chat_template.h"
#include "tandem/text/text_codec.h"

namespace tandem::test {

inline const char* kKey = "test-key";
inline Headers auth() { return {{"Authorization", std::string("Bearer ") + kKey}}; }

// Server options for the tiny model: 127.0.0.1, any port, key kKey, window 1024, greedy defaults.
server::ServerOptions tiny_options(int slots = 2);

// Starts a server on the tiny model. `gate` (optional): the load waits until it is ready.
// `codec` (optional): replaces the model's own (the fixture has no tokenizer.json).
// `backend` (optional): the model runs on it instead of the registry's CPU backend (a wrapper of
// cpu_backend(), e.g. one that counts memory).
std::unique_ptr<server::HttpServer> start_server(server::ServerOptions o,
                                                 std::shared_ptr<const TextCodec> codec = nullptr,
                                                 std::shared_future<void> gate = {},
                                                 std::shared_ptr<Backend> backend = nullptr);
std::shared_ptr<Backend> cpu_backend();  // the test registry's
// Starts a server on the tiny chat model (tests/e2e/tiny_chat_model.h: a real tokenizer and the
// Nemotron 3 template), written once per run into a temporary folder; its codec is the one
// `tandem serve` builds from the checkpoint's side files. `server_keys` (optional): YAML lines added
// to the profile's server: section ("  strict_fields: true\n").
std::unique_ptr<server::HttpServer> start_chat_server(server::ServerOptions o, const std::string& server_keys = "");
// Starts a server on a profile's model, loaded and given its codec as `tandem serve` does (with the
// test plugin folder).
std::unique_ptr<server::HttpServer> start_profile_server(server::ServerOptions o, const Profile& profile);
// Polls /health until 200 (fails the test after 10 s).
void wait_ready(uint16_t port);

// Greedy tokens of tandem::generate on the same model, the reference for every server answer.
std::vector<int32_t> reference_tokens(const std::vector<int32_t>& prompt, int max_tokens);
const std::vector<int32_t>& fixture_prompt();  // tests/fixtures/hf/latent/prompt_7.txt

rapidjson::Document parse_json(const std::string& text);
// A /v1/completions body with token ids; `extra` is spliced in as more members (",\"stream\":true").
std::string completion_body(const std::vector<int32_t>& prompt, int max_tokens, const std::string& extra = "");
std::vector<int32_t> int_array(const rapidjson::Value& v);
// The ids a /v1/completions request generated, streamed (gathered from its chunks) or not;
// `status` gets the HTTP status (no ids unless 200).
std::vector<int32_t> completion_tokens(uint16_t port, const std::vector<int32_t>& prompt, int max_tokens, bool stream,
                                       int& status);

// Token id = byte value: the tiny model has 256 ids, so its output reads as bytes. Lets the tests
// cover text prompts, stop strings and UTF-8 hold-back without a real tokenizer.
// With a chat template (optional) it renders chat prompts as a real model's codec does.
class ByteCodec final : public TextCodec {
 public:
  explicit ByteCodec(std::shared_ptr<const ChatTemplate> t = nullptr) : tmpl_(std::move(t)) {}
  std::string missing_tokenizer() const override { return ""; }
  std::string missing_chat_template() const override { return tmpl_ ? "" : "chat template (test codec without one)"; }
  std::vector<int32_t> encode(const std::string& text, bool, bool) const override;
  std::string token_bytes(int32_t id) const override { return std::string(1, char(id)); }
  ChatPrompt render_chat(const rapidjson::Value& request, bool add_generation_prompt) const override;

 private:
  std::shared_ptr<const ChatTemplate> tmpl_;
};

// A metric's value from Prometheus text (the first line that starts with `series`), -1 if absent.
double metric(const std::string& text, const std::string& series);

}  // namespace tandem::test
