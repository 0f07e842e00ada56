// `tandem synth` and `tandem bench` as a user runs them: bench of the synthetic tiny model on the CPU
// runs end to end and writes JSON with every field; synth writes a file that bench then reads.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "synth_model.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

struct CliRun {
  int status;
  std::string out, err;
};

CliRun run(const std::string& args) {
  const fs::path err = fs::temp_directory_path() / ("tandem_synth_err_" + std::to_string(::getpid()));
  const std::string bin = tandem::test::env_or("TANDEM_TEST_BINARY_DIR", TANDEM_BINARY_DIR) + "/bin/tandem ";
  FILE* p = popen((bin + args + " 2>" + err.string()).c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  std::ifstream ef(err);
  std::stringstream es;
  es << ef.rdbuf();
  fs::remove(err);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out, es.str()};
}

std::string temp(const std::string& name) {
  return (fs::temp_directory_path() / ("tandem_synth_" + std::to_string(::getpid()) + "_" + name)).string();
}

rapidjson::Document read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  rapidjson::Document d;
  d.Parse(ss.str().c_str());
  return d;
}

// Every field bench promises, with plausible values.
void expect_report(const rapidjson::Document& d, bool synthetic) {
  ASSERT_TRUE(d.IsObject());
  for (const char* k : {"command", "date", "commit", "model", "format", "device", "pattern"})
    EXPECT_TRUE(d.HasMember(k) && d[k].IsString()) << k;
  for (const char* k : {"parameters", "active_parameters", "weight_bytes", "synth_host_bytes", "peak_memory_bytes"})
    EXPECT_TRUE(d.HasMember(k) && d[k].IsUint64()) << k;
  for (const char* k : {"synth_seconds", "load_seconds", "copy_bandwidth_bytes_per_s"})
    EXPECT_TRUE(d.HasMember(k) && d[k].IsNumber()) << k;
  EXPECT_EQ(std::string(d["device"].GetString()), "cpu");
  EXPECT_GT(d["weight_bytes"].GetUint64(), 0u);
  EXPECT_GT(d["copy_bandwidth_bytes_per_s"].GetDouble(), 0.0);
  EXPECT_GT(d["peak_memory_bytes"].GetUint64(), 0u);

  const auto& b = d["bytes_per_token"];
  ASSERT_TRUE(b.IsObject());
  EXPECT_GT(b["model"].GetUint64(), 0u);
  EXPECT_LT(b["model"].GetUint64(), d["weight_bytes"].GetUint64());
  if (synthetic) EXPECT_GT(b["plan"].GetUint64(), 0u);
  EXPECT_TRUE(b.HasMember("spec") && b.HasMember("plan_matches_spec"));

  const auto& dec = d["decode"];
  for (const char* k : {"prompt_tokens", "tokens", "context"}) EXPECT_TRUE(dec[k].IsUint64()) << k;
  for (const char* k : {"seconds", "tokens_per_s", "roofline_tokens_per_s", "roofline_fraction"})
    EXPECT_TRUE(dec[k].IsNumber()) << k;
  EXPECT_GT(dec["tokens_per_s"].GetDouble(), 0.0);
  EXPECT_GT(dec["roofline_tokens_per_s"].GetDouble(), 0.0);

  ASSERT_TRUE(d["verify"].IsArray());
  ASSERT_EQ(d["verify"].Size(), 3u);
  for (rapidjson::SizeType i = 0; i < 3; ++i) {
    const auto& v = d["verify"][i];
    EXPECT_EQ(v["k"].GetUint64(), i + 1);
    EXPECT_GT(v["seconds"].GetDouble(), 0.0);
    EXPECT_TRUE(v["relative_to_k1"].IsNumber() && v["relative_to_decode_step"].IsNumber());
  }
  EXPECT_DOUBLE_EQ(d["verify"][0]["relative_to_k1"].GetDouble(), 1.0);

  EXPECT_EQ(d["prefill_chunk"].GetUint64(), 16u);
  ASSERT_TRUE(d["prefill"].IsArray());
  ASSERT_EQ(d["prefill"].Size(), 2u);
  EXPECT_EQ(d["prefill"][0]["tokens"].GetUint64(), 16u);
  EXPECT_GT(d["prefill"][0]["tokens_per_s"].GetDouble(), 0.0);

  // The CPU records no graphs: launch counts are unknown, and the report says why.
  const auto& launches = d["launches_per_token"];
  ASSERT_TRUE(launches.IsObject());
  EXPECT_TRUE(launches["counted"].IsString() && launches["counted"].GetStringLength() > 0);
  for (const char* pass : {"decode", "verify"}) {
    const auto& p = launches[pass];
    ASSERT_TRUE(p.IsObject()) << pass;
    EXPECT_EQ(p["rows"].GetUint64(), std::string(pass) == "decode" ? 1u : 3u) << pass;  // verify: min(8, --verify-max)
    EXPECT_TRUE(p["kernels"].IsNull() && p["copies"].IsNull()) << pass;
    EXPECT_EQ(std::string(p["unknown"].GetString()), "graphs off: backend 'cpu' cannot record graphs") << pass;
  }

  const auto& prof = d["layer_profile"];
  const uint64_t steps = prof["steps"].GetUint64();
  EXPECT_EQ(steps, 4u);
  ASSERT_TRUE(prof["kinds"].IsArray());
  std::set<std::string> kinds;
  const double bw = d["copy_bandwidth_bytes_per_s"].GetDouble();
  uint64_t weight_sum = 0;
  std::map<std::string, uint64_t> state, layers;
  for (const auto& k : prof["kinds"].GetArray()) {
    const std::string kind = k["kind"].GetString();
    kinds.insert(kind);
    for (const char* f : {"layers", "weight_bytes_per_token", "state_bytes_per_token"})
      ASSERT_TRUE(k[f].IsUint64()) << kind << " " << f;
    for (const char* f : {"ms_per_token", "us_per_layer", "bytes_per_s", "floor_us_per_token", "floor_us_per_layer",
                          "measured_over_floor"})
      ASSERT_TRUE(k[f].IsNumber()) << kind << " " << f;
    const uint64_t w = k["weight_bytes_per_token"].GetUint64(), st = k["state_bytes_per_token"].GetUint64();
    const uint64_t n = k["layers"].GetUint64();
    const double ms = k["ms_per_token"].GetDouble(), floor = k["floor_us_per_token"].GetDouble();
    weight_sum += w;
    state[kind] = st;
    layers[kind] = n;
    if (kind == "logits+host") {
      EXPECT_EQ(w + st, 0u);
      EXPECT_EQ(floor, 0.0);
      continue;
    }
    // Every other kind reads weights: its floor is its bytes at the copy bandwidth, and the ratio and
    // per-layer figures are the measured time over it.
    EXPECT_GT(w, 0u) << kind;
    EXPECT_GT(floor, 0.0) << kind;
    EXPECT_NEAR(floor, double(w + st) / bw * 1e6, floor * 1e-9) << kind;
    EXPECT_NEAR(k["measured_over_floor"].GetDouble(), ms * 1e3 / floor, 1e-9 * ms * 1e3 / floor) << kind;
    EXPECT_NEAR(k["floor_us_per_layer"].GetDouble() * double(n), n ? floor : 0.0, floor * 1e-9) << kind;
    EXPECT_NEAR(k["us_per_layer"].GetDouble() * double(n), n ? ms * 1e3 : 0.0, ms * 1e-6) << kind;
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"embedding", "mamba", "attention", "moe", "head", "logits+host"}));
  // The kinds' weight bytes are the model's decode bytes, split; the state bytes follow the shape: the
  // fp32 SSM state read and written per Mamba layer, the f32 K and V rows read per attention layer at
  // the timed steps' positions (prompt + 2 … prompt + steps + 1, each reading its own row too).
  EXPECT_EQ(weight_sum, b["model"].GetUint64());
  const tandem::ModelDesc shape = tandem::synth::model_shape("tiny");
  const tandem::MambaDesc& m = tandem::synth::first_layer(shape, tandem::LayerKind::Mamba)->mamba;
  const tandem::AttentionDesc& at = tandem::synth::first_layer(shape, tandem::LayerKind::Attention)->attn;
  EXPECT_EQ(state["mamba"], layers["mamba"] * 2 * uint64_t(m.n_heads * m.head_dim * m.state_size) * 4);
  const double mean_rows = double(dec["prompt_tokens"].GetUint64()) + 2 + double(steps - 1) / 2 + 1;
  EXPECT_EQ(double(state["attention"]), double(layers["attention"]) * 2 * at.n_kv_heads * at.head_dim * 4 * mean_rows);
  EXPECT_EQ(state["moe"] + state["embedding"] + state["head"], 0u);
}

const char* kQuick = "--device cpu --threads 2 --context 256 --prompt-tokens 8 --decode-tokens 8 --verify-max 3 "
                     "--verify-reps 1 --prefill 16,32 --prefill-chunk 16 --profile-layers --profile-steps 4";

}  // namespace

TEST(BenchCli, SyntheticTinyWritesEveryField) {
  const std::string json = temp("bench.json");
  for (const char* mix : {"gguf-iq2", "bf16", "nvfp4"}) {
    CliRun r = run(std::string("bench --synth tiny --mix ") + mix + " " + kQuick + " --json " + json);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("decode"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("roofline"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("launches per token     unknown (graphs off: backend 'cpu' cannot record graphs)\n"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("floor µs"), std::string::npos) << r.out;
    rapidjson::Document d = read_json(json);
    expect_report(d, true);
    EXPECT_EQ(std::string(d["model"].GetString()), std::string("synth:tiny/") + mix);
    EXPECT_GT(d["synth_host_bytes"].GetUint64(), 0u);
  }
  fs::remove(json);
}

TEST(BenchCli, SynthWritesAFileThatBenchReads) {
  const std::string gguf = temp("tiny.gguf"), json = temp("file.json");
  CliRun w = run("synth --shape tiny --mix gguf-iq2 --out " + gguf + " --seed 5");
  ASSERT_EQ(w.status, 0) << w.err;
  CliRun r = run("bench --model " + gguf + " " + kQuick + " --json " + json);
  ASSERT_EQ(r.status, 0) << r.err;
  rapidjson::Document d = read_json(json);
  expect_report(d, false);
  EXPECT_EQ(d["synth_host_bytes"].GetUint64(), 0u);
  fs::remove(gguf);
  fs::remove(json);
}

// --dry-run's counts are what --out writes: the tensor bytes are the folder's safetensors data (each
// file less its 8-byte length and JSON header), and bench reads the folder through the nvfp4 plugin.
TEST(BenchCli, Nvfp4DryRunCountsWhatTheFolderHolds) {
  const std::string dir = temp("nvfp4"), json = temp("nvfp4.json");
  CliRun dry = run("synth --shape tiny --mix nvfp4 --dry-run");
  ASSERT_EQ(dry.status, 0) << dry.err;
  long long params = 0, active = 0, bytes = 0, per_token = 0;
  const size_t at = dry.err.find("), ");
  ASSERT_NE(at, std::string::npos) << dry.err;
  ASSERT_EQ(std::sscanf(dry.err.c_str() + at, "), %lld parameters (%lld active), %lld B of tensors, %lld B read per token",
                        &params, &active, &bytes, &per_token),
            4)
      << dry.err;
  EXPECT_NE(dry.err.find("in memory (tandem bench --synth): "), std::string::npos) << dry.err;
  // The parameters are the model's, whatever the mix: bf16's line says the same.
  CliRun bf = run("synth --shape tiny --mix bf16 --dry-run");
  ASSERT_EQ(bf.status, 0) << bf.err;
  EXPECT_NE(bf.err.find(std::to_string(params) + " parameters (" + std::to_string(active) + " active)"),
            std::string::npos) << bf.err;
  EXPECT_FALSE(fs::exists(dir));
  CliRun w = run("synth --shape tiny --mix nvfp4 --out " + dir + " --shard-bytes 3000000");
  ASSERT_EQ(w.status, 0) << w.err;
  long long data = 0;
  int shards = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    ++shards;
    std::ifstream f(e.path(), std::ios::binary);
    uint64_t header = 0;
    f.read(reinterpret_cast<char*>(&header), 8);
    data += (long long)fs::file_size(e.path()) - 8 - (long long)header;
  }
  EXPECT_GT(shards, 2);
  EXPECT_EQ(data, bytes);
  CliRun r = run("bench --model " + dir + " " + kQuick + " --json " + json);
  ASSERT_EQ(r.status, 0) << r.err;
  rapidjson::Document d = read_json(json);
  expect_report(d, false);
  EXPECT_EQ(std::string(d["format"].GetString()), "nvfp4");
  // The model counts what its tensors read; the plan also counts the 4-byte scalars beside them.
  const long long model_bytes = (long long)d["bytes_per_token"]["model"].GetUint64();
  EXPECT_LE(model_bytes, per_token);
  EXPECT_GT(model_bytes, per_token - 4096);
  fs::remove_all(dir);
  fs::remove(json);
}

TEST(BenchCli, BadArgumentsAreOneLineErrors) {
  for (const char* args : {"bench --device cpu", "bench --synth tiny --model x", "bench --synth huge",
                           "bench --synth tiny --mix q4", "synth --shape tiny --out x", "bench --synth tiny --prefill 5,x"}) {
    CliRun r = run(args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}
