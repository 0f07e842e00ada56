// The tokenizer on real vocabularies (../shared/data/vocab/ggml-vocab-*.gguf): llama.cpp's expected
// ids for every test text, and decode(encode(x)) == x on those texts and on random UTF-8.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <thread>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "tandem/error.h"
#include "tandem/registry.h"
#include "tandem/weights.h"
#include "test_util.h"
#include "vocab_util.h"

namespace tandem {
namespace {

using Ids = std::vector<int32_t>;
using test::read_file;
using test::vocab;
using test::vocab_path;

// Texts are separated by lines "__ggml_vocab_test__" (llama.cpp tests/test-tokenizer-0.cpp): the
// separator takes the newline before it and the one after it.
std::vector<std::string> read_texts(const std::string& path) {
  const std::string raw = read_file(path), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t pos = 0; pos < raw.size();) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      out.push_back(raw.substr(pos));
      break;
    }
    out.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<Ids> read_ids(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<Ids> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    Ids ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | cp >> 6), s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | cp >> 12), s += char(0x80 | (cp >> 6 & 0x3F)), s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | cp >> 18), s += char(0x80 | (cp >> 12 & 0x3F)), s += char(0x80 | (cp >> 6 & 0x3F)),
        s += char(0x80 | (cp & 0x3F));
  }
}

// Valid UTF-8 mixing ASCII, whitespace runs, digits, Latin, Greek/Cyrillic, combining marks, CJK,
// Hangul and emoji.
std::string random_text(std::mt19937& g, int n_chars) {
  static const std::pair<uint32_t, uint32_t> kRanges[] = {
      {0x21, 0x7E},      {0x30, 0x39},     {0xC0, 0x24F},     {0x391, 0x3C9},   {0x410, 0x44F},
      {0x300, 0x36F},    {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3},  {0x1F300, 0x1F64F}, {0x1F900, 0x1F9FF}};
  static const char* kSpaces[] = {" ", "  ", "    ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00A0", "\u3000"};
  std::uniform_int_distribution<int> pick(0, 13);
  std::string s;
  for (int i = 0; i < n_chars; ++i) {
    int k = pick(g);
    if (k >= 10) {
      s += kSpaces[std::uniform_int_distribution<int>(0, 9)(g)];
    } else {
      auto [lo, hi] = kRanges[k];
      append_utf8(s, std::uniform_int_distribution<uint32_t>(lo, hi)(g));
    }
  }
  return s;
}

class Vocab : public testing::TestWithParam<std::string> {};

TEST_P(Vocab, MatchesLlamaCpp) {
  const std::string base = vocab_path(GetParam());
  const auto texts = read_texts(base + ".inp");
  const auto expected = read_ids(base + ".out");
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GT(texts.size(), 40u);
  const Tokenizer& t = vocab(GetParam());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(t.encode(texts[i]), expected[i]) << "text " << i << ": '" << texts[i] << "'";
}

TEST_P(Vocab, RoundTrips) {
  const Tokenizer& t = vocab(GetParam());
  std::vector<std::string> texts = read_texts(vocab_path(GetParam()) + ".inp");
  std::mt19937 g(1234);
  for (int i = 0; i < 200; ++i) texts.push_back(random_text(g, 1 + i % 60));
  for (const auto& text : texts) {
    Ids ids = t.encode(text);
    ASSERT_EQ(t.decode(ids), text);
    StreamDecoder stream(t);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    ASSERT_EQ(streamed, text);
  }
  // ~100 KB with long runs: the tokenizer must not be quadratic in the text or in a long pre-token.
  std::string large;
  while (large.size() < 100000) large += random_text(g, 200);
  large += std::string(5000, ' ') + "x" + std::string(5000, '7');
  Ids ids = t.encode(large);
  EXPECT_GT(ids.size(), 10000u);
  EXPECT_EQ(t.decode(ids), large);
}

TEST_P(Vocab, ConcurrentEncodesAgree) {
  // const methods from many threads at once (one Tokenizer serves every slot of the server).
  const Tokenizer& t = vocab(GetParam());
  const auto texts = read_texts(vocab_path(GetParam()) + ".inp");
  std::vector<std::vector<Ids>> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep)
        for (const auto& text : texts) got[k].push_back(t.encode(text));
    });
  for (auto& th : threads) th.join();
  for (int k = 1; k < 4; ++k) EXPECT_EQ(got[k], got[0]);
}

INSTANTIATE_TEST_SUITE_P(Ggml, Vocab,
                         testing::Values("gpt-2", "deepseek-coder", "falcon", "mpt", "refact", "starcoder"),
                         [](const testing::TestParamInfo<std::string>& p) {
                           std::string s = p.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// The same vocabularies with the pre_tokenizer their HF tokenizer.json files carry instead of the
// llama.cpp name: the HF path must give the same ids. Falcon's Digits step runs after ByteLevel, on
// the byte stand-ins (" ½" is "ĠÂ½" there, and splits before "½").
TEST(VocabHfPreTokenizer, MatchesLlamaCpp) {
  const std::string byte_level = R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})";
  const std::pair<std::string, std::string> cases[] = {
      {"gpt-2", byte_level},
      {"mpt", byte_level},
      {"starcoder", R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, )" + byte_level + "]}"},
      {"falcon", R"({"type": "Sequence", "pretokenizers": [{"type": "Punctuation", "behavior": "Contiguous"}, )" + byte_level +
                     R"(, {"type": "Digits", "individual_digits": false},
                        {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": false}]})"},
      {"deepseek-coder", R"({"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": "[\r\n]"}, "behavior": "Isolated", "invert": false},
          {"type": "Split", "pattern": {"Regex": "\\s?\\p{L}+"}, "behavior": "Isolated", "invert": false},
          {"type": "Split", "pattern": {"Regex": "\\s?\\p{P}+"}, "behavior": "Isolated", "invert": false},
          {"type": "Split", "pattern": {"Regex": "[一-龥ࠀ-一가-퟿]+"}, "behavior": "Isolated", "invert": false},
          {"type": "Digits", "individual_digits": true},
          {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})"},
  };
  for (const auto& [name, pre] : cases) {
    auto file = gguf::GgufFile::open(vocab_path(name));
    rapidjson::Document doc, pre_doc;
    const std::string json = gguf::tokenizer_json(file->metadata()).value();
    doc.Parse(json.data(), json.size());
    pre_doc.Parse(pre.data(), pre.size());
    ASSERT_FALSE(pre_doc.HasParseError()) << name;
    doc["pre_tokenizer"].CopyFrom(pre_doc, doc.GetAllocator());
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    doc.Accept(w);
    Tokenizer t = Tokenizer::from_json(std::string(buf.GetString(), buf.GetSize()));
    const auto texts = read_texts(vocab_path(name) + ".inp");
    const auto expected = read_ids(vocab_path(name) + ".out");
    for (size_t i = 0; i < texts.size(); ++i)
      EXPECT_EQ(t.encode(texts[i]), expected[i]) << name << " text " << i << ": '" << texts[i] << "'";
  }
}

TEST(VocabSpecials, FromGgufMetadata) {
  const Tokenizer& gpt2 = vocab("gpt-2");
  EXPECT_EQ(gpt2.vocab_size(), 50257);
  EXPECT_EQ(gpt2.eos_id(), 50256);
  EXPECT_TRUE(gpt2.is_eog(50256));
  EXPECT_TRUE(gpt2.is_special(50256));
  EXPECT_EQ(gpt2.pre_tokenizer_name(), "ggml:gpt-2");
  EXPECT_EQ(gpt2.encode("<|endoftext|>", true), (Ids{50256}));
  EXPECT_NE(gpt2.encode("<|endoftext|>", false), (Ids{50256}));

  const Tokenizer& ds = vocab("deepseek-coder");
  EXPECT_EQ(ds.bos_id(), 32013);
  EXPECT_TRUE(ds.add_bos());
  EXPECT_EQ(ds.encode("hi", false, true).front(), 32013);
  EXPECT_EQ(ds.encode("hi", false, false).front(), ds.encode("hi").front());
}

// The path a model takes: the GGUF format plugin opens the file and synthesizes the side files.
TEST(VocabPlugin, OpensThroughTheGgufFormat) {
  PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  std::unique_ptr<Checkpoint> ck = reg.format("gguf")->open(vocab_path("gpt-2"));
  // A vocabulary file is no model: asking for its config names the architecture.
  try {
    ck->config_json();
    ADD_FAILURE() << "config_json() of a gpt2 vocabulary file did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos) << e.what();
  }
  auto json = ck->side_file("tokenizer.json");
  ASSERT_TRUE(json.has_value());
  Tokenizer t = Tokenizer::from_json(*json, ck->side_file("tokenizer_config.json").value_or(""));
  EXPECT_EQ(t.encode("Hello world"), vocab("gpt-2").encode("Hello world"));
}

}  // namespace
}  // namespace tandem
