// Byte-level BPE: added-token matching, pre-tokenization, rank-ordered merges, decoding.
#include "tandem/text/tokenizer.h"

#include <cctype>
#include <queue>

#include "tandem/error.h"
#include "tokenizer_impl.h"

namespace tandem {

void AddedTokens::add(Entry e) {
  if (terminal_.empty()) terminal_.push_back(-1);  // the root
  int32_t node = 0;
  for (unsigned char c : e.content) {
    uint64_t key = uint64_t(node) << 8 | c;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      it = edges_.emplace(key, int32_t(terminal_.size())).first;
      terminal_.push_back(-1);
    }
    node = it->second;
  }
  first_[static_cast<unsigned char>(e.content[0])] = true;
  terminal_[node] = int32_t(entries_.size());
  entries_.push_back(std::move(e));
}

namespace {
bool word_byte(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }
}  // namespace

const AddedTokens::Entry* AddedTokens::match(std::string_view text, size_t pos, bool allow_special) const {
  const Entry* best = nullptr;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find(uint64_t(node) << 8 | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    int32_t t = terminal_[node];
    if (t < 0) continue;
    const Entry& e = entries_[t];
    if (e.special && !allow_special) continue;
    // single_word: not inside a word (ASCII word characters, and any non-ASCII byte, count).
    if (e.single_word && ((pos > 0 && word_byte(text[pos - 1])) || (i + 1 < text.size() && word_byte(text[i + 1]))))
      continue;
    best = &e;
  }
  return best;
}

void Tokenizer::Impl::check_id(int32_t id) const {
  check(id >= 0 && size_t(id) < flags.size() && (flags[id] & kPresent), "tokenizer: token id ", id,
        " is not in the vocabulary (size ", flags.size(), ")");
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const ByteMap& bm = ByteMap::get();
  if (ignore_merges) {
    // A piece that is a token as a whole is emitted as such, whatever the merges would build.
    std::string mapped;
    mapped.reserve(piece.size() * 2);
    for (unsigned char c : piece) mapped += bm.to_char[c];
    auto it = ids.find(mapped);
    if (it != ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id, prev, next;
  };
  const int32_t n = int32_t(piece.size());
  std::vector<Sym> sym(n);
  for (int32_t i = 0; i < n; ++i) {
    unsigned char c = piece[i];
    int32_t id = byte_ids[c] >= 0 ? byte_ids[c] : unk;
    if (id < 0) fail("tokenizer: byte 0x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15],
                     " has no token and the vocabulary has no unk_token");
    sym[i] = {id, i - 1, i + 1 < n ? i + 1 : -1};
  }
  // Lowest rank first, leftmost among equals; stale candidates (a side already merged) are skipped.
  struct Cand {
    int32_t rank, left, right, lid, rid, result;
  };
  auto later = [](const Cand& a, const Cand& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
  std::priority_queue<Cand, std::vector<Cand>, decltype(later)> q(later);
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    auto it = merges.find(pair_key(sym[l].id, sym[r].id));
    if (it != merges.end()) q.push({it->second.rank, l, r, sym[l].id, sym[r].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!q.empty()) {
    Cand c = q.top();
    q.pop();
    Sym& l = sym[c.left];
    if (l.id != c.lid || l.next != c.right || sym[c.right].id != c.rid) continue;
    l.id = c.result;
    l.next = sym[c.right].next;
    if (l.next >= 0) sym[l.next].prev = c.left;
    sym[c.right].id = -1;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  for (int32_t i = n ? 0 : -1; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out,
                                  std::vector<std::string>& scratch) const {
  if (text.empty()) return;
  scratch.clear();
  pre->split(text, scratch);
  for (const auto& piece : scratch) bpe(piece, out);
}

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json, const std::string& tokenizer_config_json,
                               const std::string& source) {
  return Tokenizer(load_tokenizer(tokenizer_json, tokenizer_config_json, source));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special, bool add_special) const {
  return impl_->encode(text, {}, parse_special, add_special);
}

std::vector<int32_t> Tokenizer::encode(const std::vector<TextSegment>& segments, bool add_special) const {
  std::string text;
  std::vector<std::pair<size_t, size_t>> plain;
  for (const TextSegment& s : segments) {
    if (s.plain && !s.text.empty()) {
      if (!plain.empty() && plain.back().second == text.size()) plain.back().second += s.text.size();
      else plain.emplace_back(text.size(), text.size() + s.text.size());
    }
    text += s.text;
  }
  return impl_->encode(text, plain, true, add_special);
}

std::vector<int32_t> Tokenizer::Impl::encode(std::string_view text, const std::vector<std::pair<size_t, size_t>>& plain,
                                             bool parse_special, bool add_special) const {
  std::vector<int32_t> out;
  std::vector<std::string> scratch;
  if (add_special && add_bos) out.push_back(bos);
  size_t seg = 0, pos = 0, next_plain = 0;  // plain[next_plain]: the first plain range not yet behind pos
  while (pos < text.size()) {
    while (next_plain < plain.size() && plain[next_plain].second <= pos) ++next_plain;
    size_t limit = text.size();  // an added token must end before the next plain byte
    if (next_plain < plain.size()) {
      if (plain[next_plain].first <= pos) {
        pos = plain[next_plain].second;
        continue;
      }
      limit = plain[next_plain].first;
    }
    const AddedTokens::Entry* e = nullptr;
    if (added.may_start(static_cast<unsigned char>(text[pos]))) e = added.match(text.substr(0, limit), pos, parse_special);
    if (!e) {
      ++pos;
      continue;
    }
    size_t end = pos;
    if (e->lstrip)
      while (end > seg && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
    encode_text(text.substr(seg, end - seg), out, scratch);
    out.push_back(e->id);
    pos += e->content.size();
    if (e->rstrip)
      while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    seg = pos;
  }
  encode_text(text.substr(seg), out, scratch);
  if (add_special && add_eos) out.push_back(eos);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& t = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    t.check_id(id);
    if (skip_special && (t.flags[id] & Impl::kSpecial)) continue;
    bytes += t.bytes[id];
  }
  return utf8_lossy(bytes);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id);
  return impl_->bytes[id];
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> out;
  impl_->pre->split(text, out);
  return out;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->text[id];
}

int32_t Tokenizer::token_id(std::string_view text) const {
  auto it = impl_->ids.find(text);
  return it == impl_->ids.end() ? -1 : it->second;
}

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->flags.size()); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->flags.size() && (impl_->flags[id] & Impl::kSpecial);
}

int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }

bool Tokenizer::is_eog(int32_t id) const {
  for (int32_t e : impl_->eog)
    if (e == id) return true;
  return false;
}

std::vector<std::string> Tokenizer::added_texts() const {
  std::vector<std::string> out;
  for (size_t id = 0; id < impl_->flags.size(); ++id)
    if (impl_->flags[id] & Impl::kAdded) out.push_back(impl_->text[id]);
  return out;
}

const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::string& Tokenizer::pre_tokenizer_name() const { return impl_->pre->name(); }

}  // namespace tandem
