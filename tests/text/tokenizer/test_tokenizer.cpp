// The tokenizer on hand-written tokenizer.json files: merge order, added and special tokens,
// ignore_merges, special ids from tokenizer_config.json, pre-tokenizer splits, errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "tandem/error.h"
#include "tandem/text/tokenizer.h"
#include "tiny_tokenizer.h"

namespace tandem {
namespace {

using test::tiny_id;
using test::tiny_json;
using test::TinySpec;
using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;

Tokenizer tiny(const TinySpec& s, const std::string& config = "") { return Tokenizer::from_json(tiny_json(s), config); }

Pieces pieces(const std::string& pre_json, const std::string& text) {
  TinySpec s;
  s.pre_json = pre_json;
  return tiny(s).pre_tokenize(text);
}

// The message of the tandem::Error that f throws; fails the test when it throws none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
    return m;
  }
  ADD_FAILURE() << "no tandem::Error thrown";
  return "";
}

TEST(Tokenizer, MergesApplyInRankOrder) {
  TinySpec s;
  s.extra_tokens = {"ab", "bc", "abc"};  // 96, 97, 98
  s.merges_json = R"(["b c", "a b", "a bc"])";
  EXPECT_EQ(tiny(s).encode("abc"), (Ids{98}));
  // The same merges as pairs, "a b" first: "ab c" is no merge, so "abc" stays two tokens.
  s.merges_json = R"([["a", "b"], ["b", "c"], ["a", "bc"]])";
  EXPECT_EQ(tiny(s).encode("abc"), (Ids{96, tiny_id('c')}));
}

TEST(Tokenizer, EqualRanksMergeLeftmostFirst) {
  TinySpec s;
  s.extra_tokens = {"aa"};
  s.merges_json = R"(["a a"])";
  Tokenizer t = tiny(s);
  EXPECT_EQ(t.encode("aaa"), (Ids{96, tiny_id('a')}));
  EXPECT_EQ(t.encode("aaaa"), (Ids{96, 96}));
}

TEST(Tokenizer, ByteLevelSpacesAndRoundTrip) {
  TinySpec s;
  s.extra_tokens = {"\xC4\xA0" "a", "\xC4\xA0" "a" "b"};  // Ġa 96, Ġab 97
  s.merges_json = R"(["Ġ a", "Ġa b"])";
  s.pre_json = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  Tokenizer t = tiny(s);
  EXPECT_EQ(t.encode("a ab a"), (Ids{tiny_id('a'), 97, 96}));
  EXPECT_EQ(t.decode({tiny_id('a'), 97, 96}), "a ab a");
  EXPECT_EQ(t.token_text(97), "\xC4\xA0" "ab");
  EXPECT_EQ(t.token_bytes(97), " ab");
  EXPECT_EQ(t.token_id("\xC4\xA0" "a"), 96);
  EXPECT_EQ(t.token_id("nope"), -1);
  EXPECT_EQ(t.vocab_size(), 98);
}

TEST(Tokenizer, IgnoreMergesEmitsWholeTokens) {
  TinySpec s;
  s.extra_tokens = {"ab", "abc"};  // 96, 97: nothing merges "ab" with "c"
  s.merges_json = R"(["a b"])";
  EXPECT_EQ(tiny(s).encode("abc"), (Ids{96, tiny_id('c')}));
  s.model_extra = R"("ignore_merges": true)";
  EXPECT_EQ(tiny(s).encode("abc"), (Ids{97}));
  // llama.cpp's llama3 family (pixtral, Nemotron's GGUF name) implies it.
  s.model_extra.clear();
  s.pre_json = R"({"type": "ggml", "name": "pixtral"})";
  Tokenizer t = tiny(s);
  EXPECT_EQ(t.encode("abc"), (Ids{97}));
  EXPECT_EQ(t.pre_tokenizer_name(), "ggml:pixtral");
}

TEST(Tokenizer, AddedTokensMatchBeforeSplitting) {
  TinySpec s;
  s.extra_tokens = {"<|im_end|>", "<x>", "<x><y>"};  // 96, 97, 98
  s.added_json = R"([
    {"id": 96, "content": "<|im_end|>", "special": true},
    {"id": 97, "content": "<x>", "special": false},
    {"id": 98, "content": "<x><y>", "special": false},
    {"id": 120, "content": "<r>", "special": false, "lstrip": true, "rstrip": true}])";
  s.pre_json = R"({"type": "ByteLevel", "add_prefix_space": false})";
  Tokenizer t = tiny(s);
  const int a = tiny_id('a'), b = tiny_id('b');
  EXPECT_EQ(t.encode("a<x>b"), (Ids{a, 97, b}));
  EXPECT_EQ(t.encode("<x><y><x>"), (Ids{98, 97}));  // longest first
  EXPECT_EQ(t.encode("a  <r>  b"), (Ids{a, 120, b}));  // lstrip/rstrip eat the spaces around it
  EXPECT_EQ(t.vocab_size(), 121);                        // an added id past the vocabulary extends it
  // Special tokens are text unless parse_special.
  Ids plain = t.encode("a<|im_end|>");
  EXPECT_EQ(plain.size(), 11u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 96), 0);
  EXPECT_EQ(t.decode(plain), "a<|im_end|>");
  EXPECT_EQ(t.encode("a<|im_end|>", true), (Ids{a, 96}));
  EXPECT_TRUE(t.is_special(96));
  EXPECT_FALSE(t.is_special(97));
  EXPECT_EQ(t.decode({a, 96, 97}), "a<|im_end|><x>");
  EXPECT_EQ(t.decode({a, 96, 97}, true), "a<x>");
  EXPECT_EQ(t.token_id("<r>"), 120);
  // An id between the vocabulary and the added one is a hole.
  EXPECT_NE(error_of([&] { t.decode({100}); }).find("id 100"), std::string::npos);
}

TEST(Tokenizer, PlainSegmentsReadNoAddedToken) {
  TinySpec s;
  s.extra_tokens = {"<|im_end|>", "<x>", "<x><y>"};  // 96, 97, 98
  s.added_json = R"([{"id": 96, "content": "<|im_end|>", "special": true},
    {"id": 97, "content": "<x>", "special": false}, {"id": 98, "content": "<x><y>", "special": false}])";
  s.pre_json = R"({"type": "ByteLevel", "add_prefix_space": false})";
  Tokenizer t = tiny(s);
  auto chars = [](const std::string& text) {
    Ids ids;
    for (char c : text) ids.push_back(tiny_id(c));
    return ids;
  };
  // Not plain: as encode(text, parse_special = true).
  EXPECT_EQ(t.encode({{"a<|im_end|><x>", false}}), (Ids{tiny_id('a'), 96, 97}));
  // Plain: neither special nor other added tokens are read.
  EXPECT_EQ(t.encode({{"a<|im_end|><x>", true}}), chars("a<|im_end|><x>"));
  // A token must lie wholly outside plain text: none across the boundary, and the longest that fits.
  EXPECT_EQ(t.encode({{"a<|im_", false}, {"end|>", true}}), chars("a<|im_end|>"));
  EXPECT_EQ(t.encode({{"<x>", false}, {"<y>", true}}), (Ids{97, tiny_id('<'), tiny_id('y'), tiny_id('>')}));
  EXPECT_EQ(t.encode({{"<x><y>", false}, {"<x>", true}, {"<x>", false}}), (Ids{98, tiny_id('<'), tiny_id('x'), tiny_id('>'), 97}));
}

TEST(Tokenizer, SpecialIdsFromConfig) {
  TinySpec s;
  s.extra_tokens = {"<s>", "</s>", "<|im_end|>"};  // 96, 97, 98
  s.added_json = R"([{"id": 96, "content": "<s>", "special": true}, {"id": 97, "content": "</s>", "special": true},
                     {"id": 98, "content": "<|im_end|>", "special": true}])";
  Tokenizer t = tiny(s, R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": true,
                            "chat_template": "{{ messages }}"})");
  EXPECT_EQ(t.bos_id(), 96);
  EXPECT_EQ(t.eos_id(), 97);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_EQ(t.encode("a", false, true), (Ids{96, tiny_id('a')}));
  EXPECT_EQ(t.encode("a"), (Ids{tiny_id('a')}));
  EXPECT_TRUE(t.is_eog(97));
  EXPECT_TRUE(t.is_eog(98));  // <|im_end|> ends a turn though it is not eos
  EXPECT_FALSE(t.is_eog(96));
  EXPECT_EQ(t.eog_ids().size(), 2u);
  EXPECT_EQ(t.chat_template(), "{{ messages }}");

  Tokenizer named = tiny(s, R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                  {"name": "default", "template": "D"}]})");
  EXPECT_EQ(named.chat_template(), "D");
  EXPECT_EQ(named.bos_id(), -1);
  EXPECT_FALSE(named.add_bos());

  // Without tokenizer_config.json, HF's post-processor shows the bos it prepends.
  s.top_extra = R"("post_processor": {"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}]})";
  Tokenizer post = tiny(s);
  EXPECT_EQ(post.bos_id(), 96);
  EXPECT_TRUE(post.add_bos());
}

TEST(PreTokenizer, Llama3Regex) {
  const std::string pre = R"({"type": "ggml", "name": "llama3"})";
  EXPECT_EQ(pieces(pre, "3333333"), (Pieces{"333", "333", "3"}));
  EXPECT_EQ(pieces(pre, "  Hello"), (Pieces{" ", " Hello"}));
  EXPECT_EQ(pieces(pre, "DON'T don't"), (Pieces{"DON", "'T", " don", "'t"}));
  EXPECT_EQ(pieces(pre, "Hello\n\nworld"), (Pieces{"Hello", "\n\n", "world"}));
  EXPECT_EQ(pieces(pre, "a.\n"), (Pieces{"a", ".\n"}));
  EXPECT_EQ(pieces(pre, "Привет, мир! 你好"), (Pieces{"Привет", ",", " мир", "!", " 你好"}));
}

TEST(PreTokenizer, LlamaCppNames) {
  EXPECT_EQ(pieces(R"({"type": "ggml", "name": "gpt-2"})", "Hello world  123 it's"),
            (Pieces{"Hello", " world", " ", " 123", " it", "'s"}));
  EXPECT_EQ(pieces(R"({"type": "ggml", "name": "starcoder"})", "a123"), (Pieces{"a", "1", "2", "3"}));
  EXPECT_EQ(pieces(R"({"type": "ggml", "name": "falcon"})", "x...y 1234"),
            (Pieces{"x", "...", "y", " ", "123", "4"}));
  EXPECT_EQ(pieces(R"({"type": "ggml", "name": "deepseek-coder"})", "ab\ncd 12"),
            (Pieces{"ab", "\n", "cd", " ", "1", "2"}));
  EXPECT_EQ(pieces(R"({"type": "ggml", "name": "tekken"})", "HelloWorld 12"),
            (Pieces{"Hello", "World", " ", "1", "2"}));
}

TEST(PreTokenizer, HfSplitBehaviours) {
  auto split = [](const std::string& behavior) {
    return pieces(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")" + behavior + R"(", "invert": false})",
                  "the-final--countdown");
  };
  // The examples of HF tokenizers' SplitDelimiterBehavior documentation.
  EXPECT_EQ(split("Removed"), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (Pieces{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(pieces(R"({"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Removed", "invert": true})",
                   "ab, cd"),
            (Pieces{"ab", "cd"}));
}

TEST(PreTokenizer, HfTypesAndSequences) {
  EXPECT_EQ(pieces(R"({"type": "Digits", "individual_digits": false})", "ab123c"), (Pieces{"ab", "123", "c"}));
  EXPECT_EQ(pieces(R"({"type": "Punctuation", "behavior": "Contiguous"})", "a!!b"), (Pieces{"a", "!!", "b"}));
  EXPECT_EQ(pieces(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})", "hi there"),
            (Pieces{" hi", " there"}));
  const std::string seq = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  EXPECT_EQ(pieces(seq, "ab12345"), (Pieces{"ab", "123", "45"}));
  TinySpec s;
  s.pre_json = seq;
  EXPECT_EQ(tiny(s).pre_tokenizer_name(), "Sequence[Split, ByteLevel]");
  EXPECT_EQ(pieces("null", "a b"), (Pieces{"a b"}));
  // After ByteLevel the next steps see byte stand-ins: " ½" is "ĠÂ½", and only "½" (0xBD) is a digit.
  EXPECT_EQ(pieces(R"({"type": "Sequence", "pretokenizers": [
                       {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
                       {"type": "Digits", "individual_digits": false}]})",
                   " \xC2\xBD"),
            (Pieces{" \xC2", "\xBD"}));
}

TEST(TokenizerErrors, NameTheField) {
  auto err = [](const std::string& json) { return error_of([&] { Tokenizer::from_json(json); }); };
  EXPECT_NE(err("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err(R"({"added_tokens": []})").find("missing 'model'"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "merges": []}})").find("model.vocab"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "Unigram", "vocab": []}})").find("model.type 'Unigram'"), std::string::npos);

  TinySpec s;
  s.extra_tokens = {"ab"};
  s.merges_json = R"(["a b", "ab", 3])";
  std::string m = err(tiny_json(s));
  EXPECT_NE(m.find("model.merges[1]"), std::string::npos) << m;
  s.extra_tokens.clear();
  s.merges_json = R"(["a b"])";  // "ab" is not in the vocabulary
  EXPECT_NE(err(tiny_json(s)).find("merged token 'ab'"), std::string::npos);
  s.merges_json = R"([["a"]])";
  EXPECT_NE(err(tiny_json(s)).find("model.merges[0]"), std::string::npos);

  s = {};
  s.pre_json = R"({"type": "ggml", "name": "no-such-pre"})";
  m = err(tiny_json(s));
  EXPECT_NE(m.find("pre_tokenizer.name"), std::string::npos) << m;
  EXPECT_NE(m.find("'no-such-pre'"), std::string::npos) << m;
  s.pre_json = R"({"type": "Metaspace", "replacement": "▁"})";
  EXPECT_NE(err(tiny_json(s)).find("'Metaspace'"), std::string::npos);
  s.pre_json = R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})";
  EXPECT_NE(err(tiny_json(s)).find("does not compile"), std::string::npos);
  s.pre_json = R"({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"})";
  EXPECT_NE(err(tiny_json(s)).find("'Sideways'"), std::string::npos);

  s = {};
  s.added_json = R"([{"id": -1, "content": "x"}])";
  EXPECT_NE(err(tiny_json(s)).find("added_tokens[0].id"), std::string::npos);
  s.added_json = "[]";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(tiny_json(s), R"({"bos_token": "<nope>"})"); }).find("bos_token '<nope>'"),
            std::string::npos);

  Tokenizer t = tiny({});
  EXPECT_NE(error_of([&] { t.decode({1, 999}); }).find("id 999"), std::string::npos);
  EXPECT_NE(error_of([&] { t.token_text(-3); }).find("id -3"), std::string::npos);
  // A byte with no token, and no unk_token to stand for it.
  EXPECT_NE(error_of([&] { t.encode("\t"); }).find("byte 0x09"), std::string::npos);
}

// Found by tests/fuzz/fuzz_tokenizer: an id of 1,222,222,246 sized the id tables to gigabytes (an
// out-of-memory, not an error), in model.vocab and in added_tokens alike.
TEST(TokenizerErrors, HugeIdsAreRejected) {
  auto err = [](const std::string& json) { return error_of([&] { Tokenizer::from_json(json); }); };
  std::string m = err(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1222222246}, "merges": []}})");
  EXPECT_NE(m.find("['b']: id 1222222246 is past the largest supported id 4194303"), std::string::npos) << m;
  m = err(R"({"model": {"type": "BPE", "vocab": {"a": 2147483647}, "merges": []}})");
  EXPECT_NE(m.find("id 2147483647 is past"), std::string::npos) << m;
  TinySpec s;
  s.added_json = R"([{"id": 1222222246, "content": "<big>"}])";
  m = err(tiny_json(s));
  EXPECT_NE(m.find("added_tokens[0].id: 1222222246 is past the largest supported id"), std::string::npos) << m;
  // The largest supported id still loads.
  s.added_json = R"([{"id": 4194303, "content": "<last>", "special": true}])";
  EXPECT_EQ(Tokenizer::from_json(tiny_json(s)).vocab_size(), 4194304);
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98\x81z"), "a\xF0\x9F\x98\x81z");
  EXPECT_EQ(utf8_lossy("a\xC3"), "a" + r);
  EXPECT_EQ(utf8_lossy("\xE2\x82"), r);                 // one cut-off character: one replacement
  EXPECT_EQ(utf8_lossy("\xE2\x82" "A"), r + "A");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);     // a surrogate is three bad bytes
  EXPECT_EQ(utf8_lossy("\xC0\x80\xFF"), r + r + r);
}

}  // namespace
}  // namespace tandem
