// Token masks for the JSON automaton: the vocabulary as a preorder byte trie, walked depth-first
// with one automaton state per trie depth, so a rejected byte prunes every token below it. Masks
// are cached per automaton state (inside an unbounded string the state repeats for every token).
#include "tandem/text/json_constraint.h"

#include <algorithm>
#include <list>

#include "json_schema.h"
#include "tandem/error.h"

namespace tandem {

using json::MatchState;

struct ConstraintVocab::Impl {
  std::vector<std::string> bytes;
  std::vector<int32_t> eos;
  std::vector<uint8_t> is_eos;
  // Preorder trie without its root: node i holds byte[i] at depth[i] (≥ 1); its subtree ends
  // before next[i]; the tokens spelled by the path to it are ids[tok_begin[i] .. tok_begin[i+1]).
  std::vector<uint8_t> byte;
  std::vector<uint16_t> depth;
  std::vector<uint32_t> next;
  std::vector<uint32_t> tok_begin;
  std::vector<int32_t> ids;
  std::vector<uint8_t> plain;     // node i and everything under it are plain bytes (json::is_plain_byte)
  std::vector<uint16_t> height;  // bytes on the longest path from node i (itself included) down
  uint32_t max_depth = 0;
};

ConstraintVocab::ConstraintVocab(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids) {
  auto v = std::make_shared<Impl>();
  v->bytes = token_bytes;
  v->is_eos.assign(token_bytes.size(), 0);
  for (int32_t e : eos_ids) {
    check(e >= 0 && size_t(e) < token_bytes.size(), "constraint vocabulary: EOS id ", e, " is outside the ",
          token_bytes.size(), "-token vocabulary");
    v->is_eos[size_t(e)] = 1;
  }
  v->eos = std::move(eos_ids);

  std::vector<int32_t> order;
  for (size_t i = 0; i < token_bytes.size(); ++i)
    if (!token_bytes[i].empty() && !v->is_eos[i]) order.push_back(int32_t(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return token_bytes[size_t(a)] < token_bytes[size_t(b)]; });
  check(std::all_of(token_bytes.begin(), token_bytes.end(), [](const std::string& s) { return s.size() < 65535; }),
        "constraint vocabulary: a token is longer than 65534 bytes");

  std::vector<uint32_t> path;  // node index per depth - 1
  std::string_view prev;
  for (int32_t t : order) {
    std::string_view s = token_bytes[size_t(t)];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < s.size() && prev[lcp] == s[lcp]) ++lcp;
    while (path.size() > lcp) {
      v->next[path.back()] = uint32_t(v->byte.size());
      path.pop_back();
    }
    for (size_t k = lcp; k < s.size(); ++k) {
      path.push_back(uint32_t(v->byte.size()));
      v->byte.push_back(uint8_t(s[k]));
      v->depth.push_back(uint16_t(k + 1));
      v->next.push_back(0);
      v->tok_begin.push_back(uint32_t(v->ids.size()));
    }
    v->ids.push_back(t);
    v->max_depth = std::max(v->max_depth, uint32_t(s.size()));
    prev = s;
  }
  for (uint32_t n : path) v->next[n] = uint32_t(v->byte.size());
  v->tok_begin.push_back(uint32_t(v->ids.size()));
  std::vector<uint32_t> not_plain_before(v->byte.size() + 1, 0);
  for (size_t i = 0; i < v->byte.size(); ++i)
    not_plain_before[i + 1] = not_plain_before[i] + !json::is_plain_byte(v->byte[i]);
  v->plain.resize(v->byte.size());
  v->height.assign(v->byte.size(), 1);
  for (size_t i = v->byte.size(); i-- > 0;) {
    v->plain[i] = not_plain_before[v->next[i]] == not_plain_before[i];
    for (size_t j = i + 1; j < v->next[i]; j = v->next[j])  // children
      v->height[i] = std::max<uint16_t>(v->height[i], uint16_t(v->height[j] + 1));
  }
  impl_ = std::move(v);
}

size_t ConstraintVocab::size() const { return impl_->bytes.size(); }
const std::vector<int32_t>& ConstraintVocab::eos_ids() const { return impl_->eos; }

JsonSchema JsonSchema::compile(std::string_view schema_json) { return JsonSchema(json::compile_schema(schema_json)); }
JsonSchema JsonSchema::any_object(uint32_t max_depth) { return JsonSchema(json::any_object_grammar(max_depth)); }

namespace {

// Scratch for the trie walk and the per-state mask cache; shared by a constraint and its copies.
struct Workspace {
  static constexpr size_t kCacheEntries = 32;
  struct Entry {
    std::string key;
    std::vector<uint64_t> bits;
  };
  std::list<Entry> cache;  // most recent first
  json::KeySets keys;      // ids appear in cached states, so the sets live as long as the cache
  std::vector<MatchState> states;
  std::vector<const MatchState*> parents;
};

std::string state_key(const MatchState& s) {
  return std::string(reinterpret_cast<const char*>(s.frames.data()), s.depth * sizeof(json::Frame));
}

}  // namespace

struct JsonConstraint::Impl {
  std::shared_ptr<const json::Grammar> g;
  ConstraintVocab vocab;
  MatchState state;
  bool done = false;
  // Snapshots before each accepted token, for rollback.
  std::vector<json::Frame> hist_frames;
  std::vector<uint32_t> hist_off;
  std::vector<uint8_t> hist_done;
  std::shared_ptr<Workspace> ws = std::make_shared<Workspace>();

  Impl(std::shared_ptr<const json::Grammar> grammar, ConstraintVocab v)
      : g(std::move(grammar)), vocab(std::move(v)), state(json::initial_state(*g)) {}

  void snapshot() {
    hist_off.push_back(uint32_t(hist_frames.size()));
    hist_frames.insert(hist_frames.end(), state.frames.begin(), state.frames.begin() + state.depth);
    hist_done.push_back(done);
  }

  bool advance(std::string_view bytes) {
    MatchState tmp;
    tmp.copy_from(state);
    for (unsigned char c : bytes)
      if (!json::step(*g, ws->keys, tmp, c)) return false;
    snapshot();
    state.copy_from(tmp);
    return true;
  }

  void walk(std::vector<uint64_t>& bits) const {
    const ConstraintVocab::Impl& v = vocab.impl();
    bits.assign((v.bytes.size() + 63) / 64, 0);
    Workspace& w = *ws;
    w.states.resize(v.max_depth + 1);
    w.parents.resize(v.max_depth + 1);
    w.parents[0] = &state;
    const size_t n = v.byte.size();
    for (size_t i = 0; i < n;) {
      const uint32_t d = v.depth[i];
      const MatchState* parent = w.parents[d - 1];
      const uint8_t c = v.byte[i];
      if (v.plain[i] && v.height[i] <= json::plain_capacity(*g, *parent)) {  // the whole subtree is allowed
        for (uint32_t k = v.tok_begin[i]; k < v.tok_begin[v.next[i]]; ++k) {
          uint32_t id = uint32_t(v.ids[k]);
          bits[id >> 6] |= uint64_t(1) << (id & 63);
        }
        i = v.next[i];
        continue;
      }
      if (json::step_is_identity(*g, *parent, c)) {
        w.parents[d] = parent;
      } else {
        MatchState& s = w.states[d];
        s.copy_from(*parent);
        if (!json::step(*g, w.keys, s, c)) {
          i = v.next[i];
          continue;
        }
        w.parents[d] = &s;
      }
      for (uint32_t k = v.tok_begin[i]; k < v.tok_begin[i + 1]; ++k) {
        uint32_t id = uint32_t(v.ids[k]);
        bits[id >> 6] |= uint64_t(1) << (id & 63);
      }
      ++i;
    }
  }

  const std::vector<uint64_t>& cached_bits() const {
    Workspace& w = *ws;
    std::string key = state_key(state);
    for (auto it = w.cache.begin(); it != w.cache.end(); ++it) {
      if (it->key == key) {
        w.cache.splice(w.cache.begin(), w.cache, it);
        return w.cache.front().bits;
      }
    }
    if (w.cache.size() == Workspace::kCacheEntries) w.cache.pop_back();
    w.cache.push_front({std::move(key), {}});
    walk(w.cache.front().bits);
    return w.cache.front().bits;
  }

  bool complete() const { return done || json::accepting(*g, state); }
};

JsonConstraint::JsonConstraint(JsonSchema schema, ConstraintVocab vocab)
    : impl_(std::make_unique<Impl>(schema.grammar(), std::move(vocab))) {}
JsonConstraint::~JsonConstraint() = default;
JsonConstraint::JsonConstraint(const JsonConstraint& o) : impl_(std::make_unique<Impl>(*o.impl_)) {}
JsonConstraint& JsonConstraint::operator=(const JsonConstraint& o) {
  if (this != &o) impl_ = std::make_unique<Impl>(*o.impl_);
  return *this;
}
JsonConstraint::JsonConstraint(JsonConstraint&&) noexcept = default;
JsonConstraint& JsonConstraint::operator=(JsonConstraint&&) noexcept = default;

void JsonConstraint::allowed(std::vector<uint8_t>& mask) const {
  const ConstraintVocab::Impl& v = impl_->vocab.impl();
  mask.assign(v.bytes.size(), 0);
  if (impl_->done) return;
  if (impl_->state.depth > 0) {
    const std::vector<uint64_t>& bits = impl_->cached_bits();
    for (size_t w = 0; w < bits.size(); ++w) {
      uint64_t x = bits[w];
      while (x) {
        mask[w * 64 + size_t(__builtin_ctzll(x))] = 1;
        x &= x - 1;
      }
    }
  }
  if (impl_->complete())
    for (int32_t e : v.eos) mask[size_t(e)] = 1;
}

std::vector<int32_t> JsonConstraint::allowed_tokens() const {
  std::vector<uint8_t> mask;
  allowed(mask);
  std::vector<int32_t> out;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) out.push_back(int32_t(i));
  return out;
}

bool JsonConstraint::accept(int32_t token) {
  const ConstraintVocab::Impl& v = impl_->vocab.impl();
  if (token < 0 || size_t(token) >= v.bytes.size() || impl_->done) return false;
  if (v.is_eos[size_t(token)]) {
    if (!impl_->complete()) return false;
    impl_->snapshot();
    impl_->done = true;
    return true;
  }
  const std::string& b = v.bytes[size_t(token)];
  return !b.empty() && impl_->advance(b);
}

bool JsonConstraint::accept_bytes(std::string_view bytes) { return !impl_->done && impl_->advance(bytes); }

bool JsonConstraint::complete() const { return impl_->complete(); }
bool JsonConstraint::finished() const { return impl_->done; }
size_t JsonConstraint::tokens_accepted() const { return impl_->hist_off.size(); }

void JsonConstraint::rollback(size_t n) {
  Impl& m = *impl_;
  check(n <= m.hist_off.size(), "json constraint: cannot roll back ", n, " tokens, only ", m.hist_off.size(),
        " were accepted");
  if (n == 0) return;
  size_t k = m.hist_off.size() - n;
  uint32_t off = m.hist_off[k];  // token k's snapshot spans [off, the next offset or the end)
  uint32_t end = k + 1 < m.hist_off.size() ? m.hist_off[k + 1] : uint32_t(m.hist_frames.size());
  m.state.depth = end - off;
  std::copy(m.hist_frames.begin() + off, m.hist_frames.begin() + end, m.state.frames.begin());
  m.done = m.hist_done[k];
  m.hist_frames.resize(off);
  m.hist_off.resize(k);
  m.hist_done.resize(k);
}

}  // namespace tandem
