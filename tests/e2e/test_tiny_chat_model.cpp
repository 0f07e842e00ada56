// tandem-make-tiny-chat-model as a user runs it: a wrong template path is a one-line error naming it
// and leaves no folder and no profile (an existing model stays as it was); the written profile holds
// an API key only when --api-key gives one.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "run_program.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using ToolRun = tandem::test::ProgramRun;
ToolRun make_model(const std::string& args) { return tandem::test::run_program("tandem-make-tiny-chat-model", args); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct TempRoot {
  fs::path root = fs::temp_directory_path() / ("tandem_tiny_" + std::to_string(::getpid()));
  TempRoot() { fs::create_directories(root); }
  ~TempRoot() { fs::remove_all(root); }
};

const std::string kTemplate = tandem::test::shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja");

}  // namespace

TEST(TinyChatModel, WrongTemplatePathLeavesNothing) {
  TempRoot t;
  const fs::path dir = t.root / "model", missing = t.root / "no-such-template.jinja";
  ToolRun r = make_model(dir.string() + " " + missing.string());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("'" + missing.string() + "'"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(fs::exists(dir.string() + ".yaml"));
  EXPECT_TRUE(fs::is_empty(t.root)) << "left behind: " << fs::directory_iterator(t.root)->path();
  // The same with parent folders to make: none of them stays.
  ToolRun deep = make_model((t.root / "a" / "b" / "model").string() + " " + missing.string());
  EXPECT_EQ(deep.status, 1);
  EXPECT_TRUE(fs::is_empty(t.root));
  // A folder given as the template is refused the same way.
  ToolRun f = make_model(dir.string() + " " + t.root.string());
  EXPECT_EQ(f.status, 1);
  EXPECT_NE(f.err.find("'" + t.root.string() + "'"), std::string::npos) << f.err;
  EXPECT_TRUE(fs::is_empty(t.root));
}

TEST(TinyChatModel, ProfileHasAKeyOnlyWhenGiven) {
  if (!fs::exists(kTemplate)) GTEST_SKIP() << "no " << kTemplate;
  TempRoot t;
  const fs::path dir = t.root / "new" / "model";  // build/e2e/tiny-chat: the parent is made
  ToolRun r = make_model(dir.string() + " " + kTemplate);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, dir.string() + ".yaml\n");
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  std::string profile = slurp(dir.string() + ".yaml");
  EXPECT_EQ(profile.find("api_key"), std::string::npos) << profile;
  EXPECT_NE(profile.find("served_model_name: tiny-chat"), std::string::npos) << profile;

  // With a key; and a later bad run leaves the existing model as it was.
  ToolRun k = make_model(dir.string() + " " + kTemplate + " --api-key s3cret");
  ASSERT_EQ(k.status, 0) << k.err;
  EXPECT_NE(slurp(dir.string() + ".yaml").find("  api_key: s3cret\n"), std::string::npos);
  const std::string before = slurp(dir / "tokenizer_config.json");
  ToolRun bad = make_model(dir.string() + " " + (t.root / "missing.jinja").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(slurp(dir / "tokenizer_config.json"), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.parent_path()), fs::directory_iterator()), 2);  // model/ and model.yaml, no partial leftovers
}
