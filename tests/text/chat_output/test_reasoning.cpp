// Thinking controls: reasoning_effort mapping, kwargs precedence, the close text taken from the
// shipped template, and the reasoning budget driving a parser the way the engine would.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tandem/text/chat_output.h"
#include "test_util.h"

namespace tandem {
namespace {

TEST(Reasoning, EffortMapping) {
  EXPECT_EQ(thinking_mode_from_effort(std::nullopt), ThinkingMode::high);
  EXPECT_EQ(thinking_mode_from_effort("none"), ThinkingMode::off);
  for (const char* e : {"minimal", "low", "medium"}) EXPECT_EQ(thinking_mode_from_effort(e), ThinkingMode::medium);
  for (const char* e : {"high", "xhigh", "max"}) EXPECT_EQ(thinking_mode_from_effort(e), ThinkingMode::high);
  try {
    thinking_mode_from_effort("extreme");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("reasoning_effort"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("extreme"), std::string::npos);
  }
}

TEST(Reasoning, TemplateKwargsWin) {
  ThinkingSettings s = resolve_thinking("medium", std::nullopt, std::nullopt, true);
  EXPECT_TRUE(s.enable_thinking);
  EXPECT_TRUE(s.medium_effort);
  s = resolve_thinking("none", std::nullopt, std::nullopt, true);
  EXPECT_FALSE(s.enable_thinking);
  EXPECT_FALSE(s.medium_effort);
  s = resolve_thinking("none", true, std::nullopt, true);  // kwargs win over reasoning_effort
  EXPECT_TRUE(s.enable_thinking);
  EXPECT_FALSE(s.medium_effort);
  s = resolve_thinking("high", std::nullopt, true, true);
  EXPECT_TRUE(s.medium_effort);
  s = resolve_thinking("low", std::nullopt, std::nullopt, false);  // template lacks medium_effort
  EXPECT_TRUE(s.enable_thinking);
  EXPECT_FALSE(s.medium_effort);
  EXPECT_TRUE(s.medium_fell_back);
}

TEST(Reasoning, CloseTextFromTemplate) {
  const std::string path = test::shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja");
  std::ifstream f(path);
  ASSERT_TRUE(f) << "missing " << path << ": the shared data folder (shared/data beside the checkout) holds the "
                 << "model's chat template, the tokenizer_config.json chat_template of "
                 << "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 saved as .jinja";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(reasoning_close_text(ss.str()), "\n</think>\n");
  EXPECT_EQ(reasoning_close_text(R"({{ "<think>\n" ~ r ~ "</think>" ~ c }})"), "</think>");
}

TEST(Reasoning, BudgetFiresOnceAtTheCount) {
  ReasoningBudget none(-1);
  EXPECT_FALSE(none.should_close(1'000'000));
  ReasoningBudget zero(0);
  EXPECT_TRUE(zero.should_close(0));
  ReasoningBudget b(64, "\n</think>\n", "Time is up.");
  EXPECT_FALSE(b.should_close(63));
  EXPECT_TRUE(b.should_close(64));
  EXPECT_EQ(b.injection(), "Time is up.\n</think>\n");
  b.mark_closed();
  EXPECT_FALSE(b.should_close(65));
}

// The engine loop: count reasoning tokens while the parser is in reasoning; at the budget, inject
// the close text (fed to the parser like generated text) and continue with the answer.
void run_budget(int64_t budget, int64_t& reasoning_tokens, ChatMessage& msg) {
  ChatOutputOptions o;
  o.starts_in_reasoning = true;
  ChatOutputParser p(o);
  ReasoningBudget rb(budget);
  reasoning_tokens = 0;
  const std::vector<std::string> answer = {"The", " answer", "."};
  size_t answer_at = 0;
  for (int step = 0; step < 200; ++step) {
    if (p.in_reasoning()) {
      if (rb.should_close(reasoning_tokens)) {
        p.feed(rb.injection());
        rb.mark_closed();
        continue;
      }
      p.feed(" hmm");
      ++reasoning_tokens;
    } else if (answer_at < answer.size()) {
      p.feed(answer[answer_at++]);
    } else {
      break;
    }
  }
  EXPECT_EQ(p.finish(FinishCause::stop), "stop");
  msg = p.message();
}

TEST(Reasoning, BudgetClosesThinkingAndTheAnswerFollows) {
  int64_t n;
  ChatMessage m;
  run_budget(5, n, m);
  EXPECT_EQ(n, 5);
  EXPECT_EQ(m.reasoning, " hmm hmm hmm hmm hmm");
  EXPECT_EQ(m.content, "The answer.");

  run_budget(0, n, m);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(m.reasoning, "");
  EXPECT_TRUE(m.had_reasoning);
  EXPECT_EQ(m.content, "The answer.");
}

}  // namespace
}  // namespace tandem
