// make_text_codec: the tokenizer (tandem/text/tokenizer.h) and chat template (tandem/text/chat_template.h) of
// a checkpoint, or of the files a profile names instead.
#include "tandem/text/text_codec.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "tandem/request.h"
#include "tandem/text/chat_output.h"
#include "tandem/text/chat_template.h"
#include "tandem/error.h"
#include "tandem/text/tokenizer.h"
#include "tandem/weights.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {

class NoTextCodec final : public TextCodec {
 public:
  explicit NoTextCodec(std::string why) : why_(std::move(why)) {}
  std::string missing_tokenizer() const override { return why_; }
  std::string missing_chat_template() const override { return why_; }
  std::vector<int32_t> encode(const std::string&, bool, bool) const override { throw not_available(why_); }
  std::string token_bytes(int32_t) const override { throw not_available(why_); }
  ChatPrompt render_chat(const rapidjson::Value&, bool) const override { throw not_available(why_); }

 private:
  std::string why_;
};

// The tags the output parser reads. Tokenizers that mark them special must still let their text
// through, or reasoning and tool calls would vanish from the output.
bool parser_tag(const std::string& t) {
  return t == "<think>" || t == "</think>" || t == "<tool_call>" || t == "</tool_call>";
}

struct Template {
  std::string source, name;
};

class TokenizerCodec final : public TextCodec {
 public:
  TokenizerCodec(Tokenizer t, std::optional<Template> tmpl, std::string no_template, bool user_special_tokens)
      : tok_(std::move(t)), no_template_(std::move(no_template)) {
    user_text_.user_special_tokens = user_special_tokens;
    if (!user_special_tokens) user_text_.added_texts = tok_.added_texts();
    if (tmpl) {
      tmpl_.emplace(tmpl->source, tmpl->name);
      close_ = reasoning_close_text(tmpl->source);
    }
    // Templates write {{ bos_token }}; the tokenizer knows what it is.
    if (tok_.bos_id() >= 0) defaults_.emplace_back("bos_token", tok_.token_text(tok_.bos_id()));
    if (tok_.eos_id() >= 0) defaults_.emplace_back("eos_token", tok_.token_text(tok_.eos_id()));
  }
  std::string missing_tokenizer() const override { return ""; }
  std::string missing_chat_template() const override { return tmpl_ ? "" : no_template_; }
  std::vector<int32_t> encode(const std::string& text, bool add_special, bool parse_special) const override {
    return tok_.encode(text, parse_special, add_special);
  }
  std::vector<int32_t> encode_prompt(const ChatPrompt& prompt) const override { return tok_.encode(prompt.segments); }
  std::string token_bytes(int32_t id) const override {
    if (!tok_.is_special(id) || parser_tag(tok_.token_text(id))) return tok_.token_bytes(id);
    return std::string();
  }
  std::vector<int32_t> end_ids() const override { return tok_.eog_ids(); }
  std::string reasoning_close() const override { return close_; }
  bool template_reads(const std::string& v) const override { return tmpl_ && tmpl_->reads_variable(v); }
  ChatPrompt render_chat(const rapidjson::Value& request, bool add_generation_prompt) const override {
    if (!tmpl_) throw not_available(no_template_);
    return render_chat_prompt(*tmpl_, request, add_generation_prompt, defaults_, user_text_);
  }

 private:
  Tokenizer tok_;
  std::optional<ChatTemplate> tmpl_;
  std::string no_template_;
  std::string close_ = "\n</think>\n";
  std::vector<std::pair<std::string, std::string>> defaults_;
  UserTextRule user_text_;
};

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), what, " '", path, "' cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::shared_ptr<TextCodec> make_text_codec(const Profile& profile, const Checkpoint& ckpt) {
  // The profile's files win; otherwise what the checkpoint carries (HF folder or GGUF metadata).
  std::optional<std::string> tj, tc;
  std::string tj_name;
  if (!profile.tokenizer.empty()) {
    tj = read_file(profile.tokenizer, "tokenizer");
    tj_name = profile.tokenizer;
    // A tokenizer_config.json beside the override belongs to it.
    if (fs::path c = fs::path(profile.tokenizer).parent_path() / "tokenizer_config.json"; fs::exists(c))
      tc = read_file(c.string(), "tokenizer config");
  } else {
    tj = ckpt.side_file("tokenizer.json");
    tj_name = ckpt.path() + " (tokenizer.json)";
  }
  if (!tj) return std::make_shared<NoTextCodec>("tokenizer (" + ckpt.path() + " has no tokenizer.json)");
  if (!tc) tc = ckpt.side_file("tokenizer_config.json");
  Tokenizer tok = Tokenizer::from_json(*tj, tc.value_or(""), tj_name);

  std::optional<Template> tmpl;
  if (!profile.chat_template.empty()) tmpl = Template{read_file(profile.chat_template, "chat template"), profile.chat_template};
  else if (auto j = ckpt.side_file("chat_template.jinja")) tmpl = Template{*j, ckpt.path() + " (chat_template.jinja)"};
  else if (!tok.chat_template().empty()) tmpl = Template{tok.chat_template(), ckpt.path() + " (tokenizer_config.json chat_template)"};
  return std::make_shared<TokenizerCodec>(
      std::move(tok), std::move(tmpl),
      "chat template (" + ckpt.path() + " has no chat_template.jinja or tokenizer_config.json chat_template; " +
          "set 'chat_template:' in the profile)",
      profile.server.special_tokens_in_user_content.value_or(false));
}

}  // namespace tandem
