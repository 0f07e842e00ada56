// HF config.json parsing: real fixture configs, Puzzle block_configs, and errors that name the field.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tandem/error.h"
#include "tandem/model_config.h"
#include "test_util.h"

using namespace tandem;

namespace {
std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
std::string error_of(const std::string& json) {
  try {
    parse_model_config(json, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
const char* kBase = R"({"model_type":"nemotron_h","vocab_size":100,"hidden_size":32,
  "hybrid_override_pattern":"M*E-","mamba_num_heads":4,"mamba_head_dim":8,"n_groups":2,"ssm_state_size":16,
  "num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,"n_routed_experts":8,"num_experts_per_tok":2,
  "moe_intermediate_size":16,"moe_shared_expert_intermediate_size":24,"intermediate_size":40,
  "routed_scaling_factor":2.5,"eos_token_id":[2,11]})";
}  // namespace

TEST(ModelConfig, HfFixtureLatent) {
  ModelDesc d = parse_model_config(slurp(test::data_path("hf/latent/config.json")), "latent");
  EXPECT_EQ(d.model_type, "nemotron_h");
  EXPECT_EQ(d.pattern(), "MEM*EM*E");
  EXPECT_EQ(d.hidden, 64);
  EXPECT_EQ(d.vocab, 256);
  const auto& m = d.layers[0].mamba;
  EXPECT_EQ(m.n_heads, 8);
  EXPECT_EQ(m.chunk_size, 16);
  EXPECT_EQ(m.conv_dim(), 64 + 2 * 2 * 16);
  EXPECT_EQ(d.layers[1].moe.latent, 24);
  EXPECT_EQ(d.layers[1].moe.top_k, 3);
  EXPECT_FLOAT_EQ(d.layers[1].moe.scaling, 2.5f);
}

TEST(ModelConfig, HfFixtureNoLatentHasMlp) {
  ModelDesc d = parse_model_config(slurp(test::data_path("hf/nolatent/config.json")), "nolatent");
  EXPECT_EQ(d.pattern(), "ME*M-EM*E");
  EXPECT_EQ(d.layers[1].moe.latent, 0);
  EXPECT_EQ(d.layers[4].mlp.width, 48);
}

TEST(ModelConfig, PatternLettersAndDefaults) {
  ModelDesc d = parse_model_config(kBase, "cfg");
  EXPECT_EQ(d.pattern(), "M*E-");
  EXPECT_EQ(d.layers[0].mamba.conv_kernel, 4);
  EXPECT_EQ(d.layers[0].mamba.chunk_size, 128);
  EXPECT_EQ(d.layers[2].moe.shared_width, 24);
  EXPECT_EQ(d.eos_ids, (std::vector<int>{2, 11}));
}

TEST(ModelConfig, PuzzleBlocksOverrideTopLevel) {
  std::string j = R"({"model_type":"nemotron_h_puzzle","vocab_size":100,"hidden_size":32,
    "mamba_num_heads":4,"mamba_head_dim":8,"n_groups":2,"ssm_state_size":16,
    "num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,
    "block_configs":[{"block_type":"mamba","ssm_state_size":16},
      {"block_type":"moe","n_routed_experts":6,"num_experts_per_tok":2,"moe_intermediate_size":16,"moe_shared_expert_intermediate_size":8},
      {"block_type":"attention"},
      {"block_type":"moe","n_routed_experts":10,"num_experts_per_tok":3,"moe_intermediate_size":24,"moe_shared_expert_intermediate_size":8,"moe_latent_size":12},
      {"block_type":"mamba","ssm_state_size":8}]})";
  ModelDesc d = parse_model_config(j, "puzzle");
  EXPECT_EQ(d.pattern(), "ME*EM");
  EXPECT_EQ(d.layers[1].moe.n_experts, 6);
  EXPECT_EQ(d.layers[3].moe.n_experts, 10);
  EXPECT_EQ(d.layers[3].moe.top_k, 3);
  EXPECT_EQ(d.layers[3].moe.width, 24);
  EXPECT_EQ(d.layers[3].moe.latent, 12);
  EXPECT_EQ(d.layers[1].moe.latent, 0);
  EXPECT_EQ(d.layers[0].mamba.state_size, 16);
  EXPECT_EQ(d.layers[4].mamba.state_size, 8);
}

TEST(ModelConfig, ErrorsNameTheField) {
  std::string s = kBase;
  EXPECT_NE(error_of("{").find("cfg.json: invalid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama"})").find("model_type 'llama' is not supported"), std::string::npos);
  std::string no_hidden = s;
  no_hidden.replace(no_hidden.find("\"hidden_size\":32,"), 17, "");
  EXPECT_NE(error_of(no_hidden).find("missing required field 'hidden_size'"), std::string::npos);
  std::string bad_type = s;
  bad_type.replace(bad_type.find("\"n_groups\":2"), 12, "\"n_groups\":\"two\"");
  EXPECT_NE(error_of(bad_type).find("field 'n_groups' must be an integer, found a string"), std::string::npos);
  std::string bad_letter = s;
  bad_letter.replace(bad_letter.find("M*E-"), 4, "M*X-");
  EXPECT_NE(error_of(bad_letter).find("unknown layer letter 'X'"), std::string::npos);
  std::string bad_groups = s;
  bad_groups.replace(bad_groups.find("\"n_groups\":2"), 12, "\"n_groups\":3");
  EXPECT_NE(error_of(bad_groups).find("must be a multiple of n_groups"), std::string::npos);
  std::string bad_k = s;
  bad_k.replace(bad_k.find("\"num_experts_per_tok\":2"), 23, "\"num_experts_per_tok\":9");
  EXPECT_NE(error_of(bad_k).find("num_experts_per_tok (9) exceeds n_routed_experts (8)"), std::string::npos);
}
