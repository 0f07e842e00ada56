// Server-test setup: the tiny model, reference generations and the byte codec.
#include "server_fixture.h"

#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "openai_json.h"
#include "tandem/generate.h"
#include "tandem/registry.h"
#include "tandem/weights.h"
#include "test_util.h"
#include "tiny_chat_model.h"

namespace tandem::test {

namespace {

PluginRegistry& registry() {
  static PluginRegistry reg;
  static std::once_flag once;
  std::call_once(once, [] { reg.load_directory(plugin_dir()); });
  return reg;
}

}  // namespace

std::shared_ptr<Backend> cpu_backend() { return registry().backend("cpu"); }

namespace {

// The loaded model's registry (drafters are looked up in it); the static one outlives every server.
std::shared_ptr<PluginRegistry> shared_registry() {
  return std::shared_ptr<PluginRegistry>(&registry(), [](PluginRegistry*) {});
}

LoadOptions tiny_load() {
  LoadOptions o;
  o.path = data_path("hf/latent");
  o.threads = 1;  // the tests share two cores with others; one thread keeps timings steady
  return o;
}

}  // namespace

server::ServerOptions tiny_options(int slots) {
  server::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.api_keys = {kKey};
  o.max_body_bytes = 64 * 1024;
  o.default_max_tokens = 32;
  o.drain_timeout_s = 5;
  o.scheduler.slots = slots;
  o.scheduler.max_queue = 64;
  o.scheduler.context = 1024;
  o.scheduler.prefill_chunk = 512;
  o.sampling.temperature = 0;
  return o;
}

std::unique_ptr<server::HttpServer> start_server(server::ServerOptions o,
                                                 std::shared_ptr<const TextCodec> codec,
                                                 std::shared_future<void> gate, std::shared_ptr<Backend> backend) {
  auto loader = [codec, gate, backend](const std::function<void(double)>& progress) {
    if (gate.valid()) gate.wait();
    server::LoadedModel m;
    m.registry = shared_registry();
    LoadOptions o = tiny_load();
    o.progress = progress;
    o.backend = backend;
    m.model = Model::load(o, registry());
    Profile p;
    p.load = tiny_load();
    m.codec = codec ? codec : make_text_codec(p, *open_checkpoint(p.load, registry()));
    m.path = tiny_load().path;
    return m;
  };
  auto s = std::make_unique<server::HttpServer>(std::move(o), loader);
  s->start();
  return s;
}

std::unique_ptr<server::HttpServer> start_chat_server(server::ServerOptions o, const std::string& server_keys) {
  static const TinyChatModel model = [] {
    auto dir = std::filesystem::temp_directory_path() / ("tandem_tiny_chat_" + std::to_string(::getpid()));
    auto m = write_tiny_chat_model(dir.string(), shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"));
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("tandem_tiny_chat_" + std::to_string(::getpid())), ec);
      std::filesystem::remove(std::filesystem::temp_directory_path() / ("tandem_tiny_chat_" + std::to_string(::getpid()) + ".yaml"), ec);
    });
    return m;
  }();
  if (server_keys.empty()) return start_profile_server(std::move(o), load_profile(model.profile));
  // The profile ends in its server: section, so the added lines join it; the copy sits in the
  // model's folder, which the exit handler removes.
  std::ifstream in(model.profile);
  std::stringstream yaml;
  yaml << in.rdbuf() << server_keys;
  const std::string path = model.dir + "/with_server_keys.yaml";
  std::ofstream(path) << yaml.str();
  return start_profile_server(std::move(o), load_profile(path));
}

std::unique_ptr<server::HttpServer> start_profile_server(server::ServerOptions o, const Profile& p) {
  auto loader = [p](const std::function<void(double)>& progress) {
    server::LoadedModel m;
    m.registry = shared_registry();
    LoadOptions lo = p.load;
    lo.progress = progress;
    m.model = Model::load(lo, registry());
    m.codec = make_text_codec(p, *open_checkpoint(p.load, registry()));
    m.path = p.load.path;
    return m;
  };
  auto s = std::make_unique<server::HttpServer>(std::move(o), loader);
  s->start();
  return s;
}

void wait_ready(uint16_t port) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    if (http_request(port, "GET", "/health").status == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "server on port " << port << " never became ready";
}

std::vector<int32_t> reference_tokens(const std::vector<int32_t>& prompt, int max_tokens) {
  static std::unique_ptr<Model> model = Model::load(tiny_load(), registry());
  static std::mutex mu;
  std::lock_guard lk(mu);
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.context = 1024;
  return generate(*model, prompt, g).tokens;
}

const std::vector<int32_t>& fixture_prompt() {
  static std::vector<int32_t> p = [] {
    std::ifstream f(data_path("hf/latent/prompt_7.txt"));
    std::vector<int32_t> v;
    int x;
    while (f >> x) v.push_back(x);
    return v;
  }();
  return p;
}

rapidjson::Document parse_json(const std::string& text) {
  rapidjson::Document d;
  d.Parse(text.c_str(), text.size());
  EXPECT_FALSE(d.HasParseError()) << "not JSON: " << text;
  return d;
}

std::string completion_body(const std::vector<int32_t>& prompt, int max_tokens, const std::string& extra) {
  std::string s = "{\"prompt\":[";
  for (size_t i = 0; i < prompt.size(); ++i) s += (i ? "," : "") + std::to_string(prompt[i]);
  return s + "],\"max_tokens\":" + std::to_string(max_tokens) + ",\"temperature\":0" + extra + "}";
}

std::vector<int32_t> int_array(const rapidjson::Value& v) {
  std::vector<int32_t> out;
  for (const auto& x : v.GetArray()) out.push_back(x.GetInt());
  return out;
}

std::vector<int32_t> completion_tokens(uint16_t port, const std::vector<int32_t>& prompt, int max_tokens, bool stream,
                                       int& status) {
  auto r = http_request(port, "POST", "/v1/completions",
                        completion_body(prompt, max_tokens, stream ? R"(,"stream":true)" : ""), auth());
  status = r.status;
  std::vector<int32_t> got;
  if (r.status != 200) return got;
  if (!stream) return int_array(parse_json(r.body)["choices"][0]["tokens"]);
  for (const auto& e : sse_events(r.body))
    if (e != "[DONE]")
      for (int32_t t : int_array(parse_json(e)["choices"][0]["tokens"])) got.push_back(t);
  return got;
}

std::vector<int32_t> ByteCodec::encode(const std::string& text, bool, bool) const {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

ChatPrompt ByteCodec::render_chat(const rapidjson::Value& request, bool add_generation_prompt) const {
  if (!tmpl_) throw not_available(missing_chat_template());
  return render_chat_prompt(*tmpl_, request, add_generation_prompt);
}

double metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series, 0) == 0 && line.size() > series.size() && line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  return -1;
}

}  // namespace tandem::test
