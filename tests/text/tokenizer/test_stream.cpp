// StreamDecoder: whole characters only, held-back bytes, U+FFFD for bytes that cannot become valid.
#include <gtest/gtest.h>

#include "tandem/error.h"
#include "tandem/text/tokenizer.h"
#include "vocab_util.h"

namespace tandem {
namespace {

const std::string kRep = "\xEF\xBF\xBD";

// The id of the gpt-2 token that stands for exactly `bytes`.
int32_t byte_token(const Tokenizer& t, const std::string& bytes) {
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    if (t.token_bytes(id) == bytes) return id;
  ADD_FAILURE() << "no token for the bytes";
  return -1;
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const Tokenizer& t = test::vocab("gpt-2");
  const std::string text = "naïve 😁 日本語 🌫️ ok";
  std::vector<int32_t> ids = t.encode(text);
  StreamDecoder s(t);
  std::string out;
  int held = 0;
  for (int32_t id : ids) {
    std::string piece = s.push(id);
    EXPECT_EQ(utf8_lossy(piece), piece) << "a push returned a broken character";
    if (s.pending_bytes() > 0) ++held;
    out += piece;
  }
  EXPECT_GT(held, 0) << "expected some character to span tokens in gpt-2";
  EXPECT_EQ(s.pending_bytes(), 0u);
  out += s.flush();
  EXPECT_EQ(out, text);
}

TEST(StreamDecoder, EmojiByteByByte) {
  const Tokenizer& t = test::vocab("gpt-2");
  const std::string emoji = "\xF0\x9F\x98\x81";
  StreamDecoder s(t);
  EXPECT_EQ(s.push(byte_token(t, "\xF0")), "");
  EXPECT_EQ(s.push(byte_token(t, "\x9F")), "");
  EXPECT_EQ(s.push(byte_token(t, "\x98")), "");
  EXPECT_EQ(s.pending_bytes(), 3u);
  EXPECT_EQ(s.push(byte_token(t, "\x81")), emoji);
  EXPECT_EQ(s.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacements) {
  const Tokenizer& t = test::vocab("gpt-2");
  const int32_t a = t.encode("A").at(0);
  StreamDecoder s(t);
  EXPECT_EQ(s.push(byte_token(t, "\xC3")), "");
  EXPECT_EQ(s.push(a), kRep + "A");               // the character was never finished
  EXPECT_EQ(s.push(byte_token(t, "\xFF")), kRep);  // can never start a character: at once
  EXPECT_EQ(s.push(byte_token(t, "\xE2")), "");
  EXPECT_EQ(s.push(byte_token(t, "\x82")), "");
  EXPECT_EQ(s.flush(), kRep);                      // one replacement for the cut-off character
  EXPECT_EQ(s.pending_bytes(), 0u);
  // The same ids in one decode give the same text.
  EXPECT_EQ(t.decode({byte_token(t, "\xC3"), a, byte_token(t, "\xFF"), byte_token(t, "\xE2"), byte_token(t, "\x82")}),
            kRep + "A" + kRep + kRep);
}

TEST(StreamDecoder, SkipsSpecialTokensWhenAsked) {
  const Tokenizer& t = test::vocab("gpt-2");
  StreamDecoder keep(t), skip(t, true);
  EXPECT_EQ(keep.push(50256), "<|endoftext|>");
  EXPECT_EQ(skip.push(50256), "");
  EXPECT_THROW(skip.push(50257), Error);
}

}  // namespace
}  // namespace tandem
