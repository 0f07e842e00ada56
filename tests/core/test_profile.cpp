// YAML profiles: values, relative paths, and one-line errors naming the key and the file.
#include <gtest/gtest.h>

#include <algorithm>

#include "tandem/error.h"
#include "tandem/profile.h"

using namespace tandem;

namespace {
std::string error_of(const std::string& yaml) {
  try {
    parse_profile(yaml, "/cfg/p.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(Profile, ParsesEveryKey) {
  Profile p = parse_profile(R"(
model: ../models/tiny
format: safetensors
device: cpu
threads: 2
context: 512
max_tokens: 16
mamba: mamba2
hf_prefill_dt_clamp: true
sampling: {temperature: 0.7, top_k: 40, top_p: 0.9, min_p: 0.05, seed: 7}
)", "/cfg/p.yaml");
  EXPECT_EQ(p.load.path, "/models/tiny");
  EXPECT_EQ(p.load.format, "safetensors");
  EXPECT_EQ(p.load.threads, 2);
  EXPECT_EQ(p.context, 512);
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_TRUE(p.load.hf_prefill_dt_clamp);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.7f);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_EQ(p.sampling.seed, 7u);
}

TEST(Profile, UnknownKeyNamesKeyAndFile) {
  std::string e = error_of("model: x\ncontxt: 5\n");
  EXPECT_NE(e.find("/cfg/p.yaml: unknown key 'contxt'"), std::string::npos) << e;
  e = error_of("model: x\nsampling: {temp: 1}\n");
  EXPECT_NE(e.find("unknown key 'sampling.temp'"), std::string::npos) << e;
}

TEST(Profile, WrongTypeNamesKey) {
  std::string e = error_of("model: x\ncontext: lots\n");
  EXPECT_NE(e.find("/cfg/p.yaml: key 'context' must be an integer, found 'lots'"), std::string::npos) << e;
  e = error_of("model: x\nsampling: {temperature: hot}\n");
  EXPECT_NE(e.find("key 'sampling.temperature' must be a number"), std::string::npos) << e;
  e = error_of("model: x\nhf_prefill_dt_clamp: 3\n");
  EXPECT_NE(e.find("key 'hf_prefill_dt_clamp' must be true or false"), std::string::npos) << e;
  e = error_of("model: [a, b]\n");
  EXPECT_NE(e.find("key 'model' must be a path, found 'a list'"), std::string::npos) << e;
  e = error_of("model: x\nsampling: 5\n");
  EXPECT_NE(e.find("'sampling' must be a mapping"), std::string::npos) << e;
}

TEST(Profile, BadYamlAndValues) {
  EXPECT_NE(error_of("model: [unclosed\n").find("invalid YAML at line"), std::string::npos);
  EXPECT_NE(error_of("").find("the profile is empty"), std::string::npos);
  EXPECT_NE(error_of("model: x\ncontext: -4\n").find("'context' must be positive"), std::string::npos);
}

// Found by tests/fuzz/fuzz_profile: yaml-cpp quotes a bad escape's character back (here a vertical tab), a
// quoted key may hold control characters, and a list used as a key made yaml-cpp throw its own
// exception past parse_profile. Each is now a one-line tandem::Error naming the file.
TEST(Profile, FileTextStaysOnOneLine) {
  auto plain = [](const std::string& s) {
    return std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
  };
  std::string e = error_of("model: \"a\\\v\"\n");
  EXPECT_NE(e.find("/cfg/p.yaml: invalid YAML at line 1: unknown escape character"), std::string::npos) << e;
  EXPECT_TRUE(plain(e)) << e;
  e = error_of("model: x\n\"cont\\next\": 5\n");
  EXPECT_NE(e.find("unknown key 'cont?ext'"), std::string::npos) << e;
  EXPECT_TRUE(plain(e)) << e;
  e = error_of("model: x\n? [a, b]\n: 5\n");
  EXPECT_NE(e.find("/cfg/p.yaml: invalid profile"), std::string::npos) << e;
  EXPECT_TRUE(plain(e)) << e;
}

TEST(Profile, ShippedProfilesParse) {
  for (const char* f : {"tiny-latent.yaml"}) {
    Profile p = load_profile(std::string(TANDEM_SOURCE_DIR) + "/configs/" + f);
    EXPECT_FALSE(p.load.path.empty()) << f;
  }
}
