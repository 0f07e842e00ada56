// make_text_codec: the model folder's tokenizer.json (tandem/tokenizer.h) and chat template
// (tandem/chat_template.h: tokenizer_config.json's chat_template, or chat_template.jinja).
#include "text_codec.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "openai_json.h"
#include "tandem/chat_template.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

namespace fs = std::filesystem;

namespace {

class NoTextCodec final : public TextCodec {
 public:
  explicit NoTextCodec(std::string why) : why_(std::move(why)) {}
  std::string missing_tokenizer() const override { return why_; }
  std::string missing_chat_template() const override { return why_; }
  std::vector<int32_t> encode(const std::string&, bool, bool) const override { throw not_implemented(why_); }
  std::string token_bytes(int32_t) const override { throw not_implemented(why_); }
  ChatPrompt render_chat(const rapidjson::Value&, bool) const override { throw not_implemented(why_); }

 private:
  std::string why_;
};

class TokenizerCodec final : public TextCodec {
 public:
  TokenizerCodec(Tokenizer t, std::optional<ChatTemplate> tmpl, std::string no_template)
      : tok_(std::move(t)), tmpl_(std::move(tmpl)), no_template_(std::move(no_template)) {
    // Templates write {{ bos_token }}; the tokenizer knows what it is.
    if (tok_.bos_id() >= 0) defaults_.emplace_back("bos_token", tok_.token_text(tok_.bos_id()));
    if (tok_.eos_id() >= 0) defaults_.emplace_back("eos_token", tok_.token_text(tok_.eos_id()));
  }
  std::string missing_tokenizer() const override { return ""; }
  std::string missing_chat_template() const override { return tmpl_ ? "" : no_template_; }
  std::vector<int32_t> encode(const std::string& text, bool add_special, bool parse_special) const override {
    return tok_.encode(text, parse_special, add_special);
  }
  std::string token_bytes(int32_t id) const override { return tok_.is_special(id) ? std::string() : tok_.token_bytes(id); }
  std::vector<int32_t> end_ids() const override { return tok_.eog_ids(); }
  ChatPrompt render_chat(const rapidjson::Value& request, bool add_generation_prompt) const override {
    if (!tmpl_) throw not_implemented(no_template_);
    return render_chat_prompt(*tmpl_, request, add_generation_prompt, defaults_);
  }

 private:
  Tokenizer tok_;
  std::optional<ChatTemplate> tmpl_;
  std::string no_template_;
  std::vector<std::pair<std::string, std::string>> defaults_;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::shared_ptr<TextCodec> make_text_codec(const Profile& profile) {
  // HF layout: tokenizer.json, tokenizer_config.json and maybe chat_template.jinja beside the weights.
  fs::path dir = profile.load.path;
  if (!fs::is_directory(dir)) dir = dir.parent_path();
  fs::path tj = dir / "tokenizer.json";
  if (!fs::exists(tj)) return std::make_shared<NoTextCodec>("tokenizer (no tokenizer.json in " + dir.string() + ")");
  fs::path tc = dir / "tokenizer_config.json";
  Tokenizer tok = Tokenizer::from_json(read_file(tj), fs::exists(tc) ? read_file(tc) : "", tj.string());
  std::optional<ChatTemplate> tmpl;
  if (fs::path jf = dir / "chat_template.jinja"; fs::exists(jf)) tmpl = ChatTemplate::from_file(jf.string());
  else if (!tok.chat_template().empty()) tmpl.emplace(tok.chat_template(), tc.string() + " chat_template");
  return std::make_shared<TokenizerCodec>(
      std::move(tok), std::move(tmpl),
      "chat template (neither chat_template.jinja nor a chat_template in tokenizer_config.json in " + dir.string() + ")");
}

}  // namespace tandem::server
