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

#include <rapidjson/document.h>

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

// `generate --print-ids` on the tiny latent profile with `flags`: its ids equal generate()'s with `g`.
CliRun expect_generate_ids(const std::string& flags, const GenerateOptions& g) {
  std::string pf = prompt_file();
  CliRun r = run("generate --config " + std::string(TANDEM_SOURCE_DIR) + "/configs/tiny-latent.yaml --tokens " + pf +
                 " --print-ids " + flags);
  fs::remove(pf);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(test::ids_in(r.out), generate(*model("hf/latent"), kPrompt, g).tokens);
  return r;
}

}  // namespace

TEST(Cli, GeneratePrintsGreedyIds) {
  GenerateOptions g;
  g.max_tokens = 12;
  g.context = 64;
  CliRun r = expect_generate_ids("--max-tokens 12", g);
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

// --prefill-chunk reaches generate(): the prompt read 2 tokens a pass gives generate()'s ids for that
// chunk (the default is kDefaultPrefillChunk, serve's; a long prompt is never one pass).
TEST(Cli, GeneratePrefillChunkIsPassedOn) {
  GenerateOptions g;
  EXPECT_EQ(g.prefill_chunk, kDefaultPrefillChunk);
  g.max_tokens = 8;
  g.context = 64;
  g.prefill_chunk = 2;
  expect_generate_ids("--max-tokens 8 --prefill-chunk 2", g);
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
      {"generate --config " + cfg + " --tokens " + pf + " --prefill-chunk 0", "--prefill-chunk must be at least 1, found 0"},
      {"generate --config " + cfg + " --tokens /nonexistent.txt", "token file '/nonexistent.txt' cannot be read"},
      {"generate --config " + cfg + " --prompt hello", "needs a tokenizer"},
      {"generate --tokens " + pf, "no model: give --config"},
      {"generate --model /nonexistent --tokens " + pf, "'/nonexistent' does not exist"},
      {"generate --config /nonexistent.yaml --tokens " + pf, "profile '/nonexistent.yaml' cannot be read"},
      {"generate --config " + cfg + " --tokens " + pf + " --device tpu", "no backend plugin provides 'tpu'"},
      {"logits --config " + cfg + " --tokens " + pf, "--out FILE.npy are required"},
      {"generate --config " + cfg + " --tokens " + pf + " --trace-drafts /tmp/t.jsonl", "--trace-drafts needs drafters"},
      {"generate --config " + cfg + " --tokens " + pf + " --draft lookup --trace-drafts /nonexistent/t.jsonl",
       "--trace-drafts '/nonexistent/t.jsonl' cannot be written"},
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
  EXPECT_EQ(test::ids_in(ids.out), want.tokens);
  // The text is those ids' bytes; control tokens (the EOS ids) have none.
  std::string bytes;
  for (int32_t t : want.tokens)
    if (t >= test::kTinyFirstByte) bytes += char(t - test::kTinyFirstByte);
    else if (t >= 12 && t <= 17) bytes += std::vector<std::string>{"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}[size_t(t - 12)];
  EXPECT_EQ(text.out, utf8_lossy(bytes) + "\n");
  fs::remove_all(dir);
  fs::remove(m.profile);
}

// --trace-drafts: one JSON line per drafted step; the committed lengths chain, no step accepts more
// than it verified, and the accepted drafts plus each step's own token, after the prefill's first
// token, are the generated ids (equal to a plain run's). The tiny chat model repeats itself, so the
// lookup drafter proposes and is partly accepted.
TEST(Cli, GenerateTraceDraftsWritesOneLinePerStep) {
  fs::path dir = fs::temp_directory_path() / ("tandem_cli_trace_" + std::to_string(::getpid()));
  auto m = test::write_tiny_chat_model(dir.string(),
                                       test::shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"));
  const fs::path trace = dir.string() + ".jsonl";
  const std::string args = "generate --config " + m.profile +
                           " --prompt 'Repeat: hello hello hello hello hello' --max-tokens 300 --print-ids";
  CliRun plain = run(args);
  CliRun drafted = run(args + " --draft lookup --draft-k 4 --trace-drafts " + trace.string());
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(drafted.status, 0) << drafted.err;
  EXPECT_EQ(drafted.out, plain.out);
  std::vector<int32_t> ids;
  {
    std::stringstream ss(drafted.out);
    for (int32_t v; ss >> v;) ids.push_back(v);
  }
  ASSERT_GT(ids.size(), 1u);
  // "drafting: N steps (…)" on stderr: the number of lines the trace must hold.
  const size_t at = drafted.err.find("drafting: ");
  ASSERT_NE(at, std::string::npos) << drafted.err;
  const long steps = std::stol(drafted.err.substr(at + 10));

  std::ifstream f(trace);
  ASSERT_TRUE(f.good()) << trace;
  std::vector<int32_t> emitted = {ids[0]};
  int64_t committed = -1;
  long lines = 0, accepted_total = 0, partial = 0;
  for (std::string line; std::getline(f, line); ++lines) {
    rapidjson::Document d;
    d.Parse(line.c_str());
    ASSERT_FALSE(d.HasParseError()) << "line " << lines << ": " << line;
    EXPECT_EQ(d["step"].GetInt64(), lines);
    if (committed >= 0) EXPECT_EQ(d["committed"].GetInt64(), committed) << line;
    const int k = d["k"].GetInt(), accepted = d["accepted"].GetInt();
    EXPECT_LE(accepted, k) << line;
    ASSERT_TRUE(d["proposals"].IsObject() && d["proposals"].HasMember("lookup")) << line;
    const auto& proposal = d["proposals"]["lookup"];
    EXPECT_EQ(k > 0, d["chain"].IsString()) << line;
    if (k > 0) {
      EXPECT_STREQ(d["chain"].GetString(), "lookup");
      ASSERT_GE(int(proposal.Size()), k) << line;
    }
    const auto& acc = d["accepted_tokens"];
    ASSERT_EQ(int(acc.Size()), accepted) << line;
    for (int i = 0; i < accepted; ++i) {
      EXPECT_EQ(acc[rapidjson::SizeType(i)].GetInt(), proposal[rapidjson::SizeType(i)].GetInt()) << line;
      emitted.push_back(acc[rapidjson::SizeType(i)].GetInt());
    }
    if (!d["bonus"].IsNull()) emitted.push_back(d["bonus"].GetInt());
    accepted_total += accepted;
    partial += k > 0 && accepted < k;
    committed = d["committed"].GetInt64() + accepted + 1;
  }
  EXPECT_EQ(lines, steps);
  EXPECT_EQ(emitted, ids);
  EXPECT_GT(accepted_total, 0) << "lookup had nothing accepted; the trace shows no drafting";
  std::printf("trace: %ld steps, %ld drafts accepted, %ld chains partly rejected\n", lines, accepted_total, partial);
  fs::remove(trace);
  fs::remove_all(dir);
  fs::remove(m.profile);
}

// Every command's --help (and -h) is its usage on stdout, exit 0: a line naming the command, then its
// main flags with their help, read from the same table the parser checks flags against.
TEST(Cli, EveryCommandHasHelp) {
  const std::map<std::string, std::vector<std::string>> commands = {
      {"generate",
       {"--prompt TEXT", "--tokens FILE", "--max-tokens N", "--draft", "--trace-drafts FILE.jsonl", "--config",
        "--model PATH"}},
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
