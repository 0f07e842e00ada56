// Runs build/bin/tandem as a user would: ids from generate and logits from `logits` equal what the
// engine computes in process; bad flags and files are one-line errors with exit status 1 or 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "tandem/generate.h"
#include "tandem/npy.h"
#include "tandem/registry.h"
#include "tandem/text/tokenizer.h"
#include "run_program.h"
#include "test_util.h"
#include "tiny_chat_model.h"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

using CliRun = tandem::test::ProgramRun;
CliRun run(const std::string& args) { return tandem::test::run_program("tandem", args); }

std::string prompt_file() {
  fs::path p = fs::temp_directory_path() / ("tandem_cli_prompt_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(p) << "5 17 200 3\n99 42 7\n";
  return p.string();
}

const std::vector<int32_t> kPrompt = {5, 17, 200, 3, 99, 42, 7};

std::unique_ptr<Model> model(const std::string& rel) {
  static PluginRegistry reg;
  static bool loaded = false;
  if (!loaded) reg.load_directory(test::plugin_dir()), loaded = true;
  LoadOptions o;
  o.path = test::data_path(rel);
  return Model::load(o, reg);
}

}  // namespace

TEST(Cli, GeneratePrintsGreedyIds) {
  std::string pf = prompt_file();
  CliRun r = run("generate --config " + std::string(TANDEM_SOURCE_DIR) + "/configs/tiny-latent.yaml --tokens " + pf +
              " --max-tokens 12 --print-ids");
  fs::remove(pf);
  ASSERT_EQ(r.status, 0) << r.err;
  auto m = model("hf/latent");
  GenerateOptions g;
  g.max_tokens = 12;
  g.context = 64;
  GenerateResult want = generate(*m, kPrompt, g);
  std::stringstream ss(r.out);
  std::vector<int32_t> got;
  int32_t v;
  while (ss >> v) got.push_back(v);
  EXPECT_EQ(got, want.tokens);
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

TEST(Cli, SeededSamplingIsReproducible) {
  std::string pf = prompt_file();
  std::string args = "generate --model " + test::data_path("hf/nolatent") + " --tokens " + pf +
                     " --max-tokens 10 --temperature 0.9 --top-p 0.95 --seed 11 --print-ids";
  CliRun a = run(args), b = run(args);
  fs::remove(pf);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(Cli, LogitsWritesEveryPosition) {
  std::string pf = prompt_file();
  fs::path out = fs::temp_directory_path() / ("tandem_cli_logits_" + std::to_string(::getpid()) + ".npy");
  CliRun r = run("logits --model " + test::data_path("hf/nolatent") + " --tokens " + pf + " --out " + out.string());
  fs::remove(pf);
  ASSERT_EQ(r.status, 0) << r.err;
  NpyArray a = read_npy(out.string());
  fs::remove(out);
  auto m = model("hf/nolatent");
  auto seq = m->new_sequence(64);
  std::vector<float> want;
  m->forward(*seq, kPrompt, ForwardMode::Prefill, want, true);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{7, 256}));
  EXPECT_EQ(a.data, want);
}

TEST(Cli, BadInputsAreOneLineErrors) {
  std::string pf = prompt_file();
  const std::string cfg = std::string(TANDEM_SOURCE_DIR) + "/configs/tiny-latent.yaml";
  struct Case {
    std::string args, needle;
  } cases[] = {
      {"generate --config " + cfg + " --tokens " + pf + " --bogus 1", "unknown option '--bogus'"},
      {"generate --config " + cfg + " --tokens " + pf + " --max-tokens many", "--max-tokens expects an integer"},
      {"generate --config " + cfg + " --tokens /nonexistent.txt", "token file '/nonexistent.txt' cannot be read"},
      {"generate --config " + cfg + " --prompt hello", "needs a tokenizer"},
      {"generate --tokens " + pf, "no model: give --config"},
      {"generate --model /nonexistent --tokens " + pf, "'/nonexistent' does not exist"},
      {"generate --config /nonexistent.yaml --tokens " + pf, "profile '/nonexistent.yaml' cannot be read"},
      {"generate --config " + cfg + " --tokens " + pf + " --device tpu", "no backend plugin provides 'tpu'"},
      {"logits --config " + cfg + " --tokens " + pf, "--out FILE.npy are required"},
  };
  for (const auto& c : cases) {
    CliRun r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  fs::remove(pf);
  EXPECT_EQ(run("frobnicate").status, 2);
}

TEST(Cli, GeneratePromptThroughTheModelsTokenizer) {
  fs::path dir = fs::temp_directory_path() / ("tandem_cli_chat_" + std::to_string(::getpid()));
  auto m = test::write_tiny_chat_model(dir.string(),
                                       test::shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"));
  CliRun text = run("generate --config " + m.profile + " --prompt 'Hello there' --max-tokens 12");
  CliRun ids = run("generate --config " + m.profile + " --prompt 'Hello there' --max-tokens 12 --print-ids");
  ASSERT_EQ(text.status, 0) << text.err;
  ASSERT_EQ(ids.status, 0) << ids.err;
  // The prompt is the bytes of the text (the tokenizer has no merges); the ids are generate()'s.
  std::vector<int32_t> prompt;
  for (unsigned char c : std::string("Hello there")) prompt.push_back(test::kTinyFirstByte + c);
  static PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  LoadOptions o;
  o.path = m.dir;
  GenerateOptions g;
  g.max_tokens = 12;
  g.context = 64;
  GenerateResult want = generate(*Model::load(o, reg), prompt, g);
  std::stringstream ss(ids.out);
  std::vector<int32_t> got;
  int32_t v;
  while (ss >> v) got.push_back(v);
  EXPECT_EQ(got, want.tokens);
  // The text is those ids' bytes; control tokens (the EOS ids) have none.
  std::string bytes;
  for (int32_t t : want.tokens)
    if (t >= test::kTinyFirstByte) bytes += char(t - test::kTinyFirstByte);
    else if (t >= 12 && t <= 17) bytes += std::vector<std::string>{"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}[size_t(t - 12)];
  EXPECT_EQ(text.out, utf8_lossy(bytes) + "\n");
  fs::remove_all(dir);
  fs::remove(m.profile);
}

// Every command's --help (and -h) is its usage on stdout, exit 0: a line naming the command, then its
// main flags with their help, read from the same table the parser checks flags against.
TEST(Cli, EveryCommandHasHelp) {
  const std::map<std::string, std::vector<std::string>> commands = {
      {"generate", {"--prompt TEXT", "--tokens FILE", "--max-tokens N", "--draft", "--config", "--model PATH"}},
      {"logits", {"--tokens FILE", "--out FILE.npy", "--model PATH"}},
      {"inspect", {"--config", "--model PATH", "--tensor NAME", "--dequantize OUT.npy"}},
      {"eval", {"--text FILE", "--tokens FILE", "--rows R", "--row-tokens N", "--ref-config", "--ref-model PATH",
                "--ref-logits FILE", "--save-logits FILE", "--score-second-half", "--per-layer", "--json FILE"}},
      {"plugins", {"--verbose"}},
      {"serve", {"--host", "--port N", "--api-key", "--slots N", "--drain-timeout S", "--model PATH"}},
      {"synth", {"--shape", "--mix", "--out PATH", "--dry-run", "--drafter NAME"}},
      {"bench", {"--synth SHAPE", "--decode-tokens N", "--json FILE", "--model PATH"}},
      {"convert", {"--to exl3", "--bits B", "INPUT_DIR OUTPUT_DIR"}},
  };
  for (const auto& [cmd, flags] : commands) {
    for (const std::string form : {" --help", " -h", " --bogus 1 --help"}) {
      CliRun r = run(cmd + form);
      EXPECT_EQ(r.status, 0) << cmd << form << "\n" << r.err;
      EXPECT_EQ(r.out.rfind("usage: tandem " + cmd, 0), 0u) << cmd << form << "\n" << r.out;
      for (const auto& f : flags) EXPECT_NE(r.out.find(f), std::string::npos) << cmd << ": no " << f << "\n" << r.out;
      EXPECT_NE(r.out.find("--verbose"), std::string::npos) << r.out;
      // One line a flag, each with its help text after the flag.
      std::stringstream ss(r.out);
      std::string line;
      while (std::getline(ss, line))
        if (line.rfind("  --", 0) == 0) EXPECT_NE(line.find_first_not_of(' ', line.find("  ", 2)), std::string::npos) << line;
    }
    // `tandem help CMD` is the same text.
    EXPECT_EQ(run("help " + cmd).out, run(cmd + " --help").out) << cmd;
  }
  for (const std::string top : {"--help", "-h", "help"}) {
    CliRun r = run(top);
    EXPECT_EQ(r.status, 0) << top;
    EXPECT_EQ(r.out.rfind("usage: tandem", 0), 0u) << r.out;
    for (const auto& [cmd, flags] : commands) EXPECT_NE(r.out.find("\n  " + cmd + " "), std::string::npos) << cmd << "\n" << r.out;
  }
  // An unknown flag still fails, pointing at --help.
  CliRun bad = run("serve --bogus");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("see 'tandem serve --help'"), std::string::npos) << bad.err;
}
