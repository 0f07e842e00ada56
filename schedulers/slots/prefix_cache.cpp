// Prefix checkpoints (tandem::PrefixCache): an LRU list of snapshots keyed by a hash chain over
// chunk-sized token blocks, each hit verified against the stored tokens.
#include "tandem/prefix_cache.h"

#include <algorithm>

#include "tandem/error.h"

namespace tandem {

namespace {

// FNV-1a over 32-bit words, then a splitmix finaliser so that nearby chains spread.
uint64_t add_word(uint64_t h, uint64_t w) { return (h ^ w) * 0x100000001b3ull; }
uint64_t finish(uint64_t h) {
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

// chain[b] = the hash of prompt[0, b·chunk), for b = 0 … size / chunk.
std::vector<uint64_t> block_chain(const std::vector<int32_t>& prompt, int64_t upto, int chunk) {
  std::vector<uint64_t> chain(size_t(upto / chunk) + 1);
  uint64_t h = 0xcbf29ce484222325ull;
  chain[0] = h;
  for (int64_t b = 1; b < int64_t(chain.size()); ++b) {
    for (int64_t i = (b - 1) * chunk; i < b * chunk; ++i) h = add_word(h, uint32_t(prompt[size_t(i)]));
    chain[size_t(b)] = h = finish(h);
  }
  return chain;
}

uint64_t key_at(const std::vector<uint64_t>& chain, const std::vector<int32_t>& prompt, int64_t n, int chunk) {
  uint64_t h = chain[size_t(n / chunk)];
  for (int64_t i = n / chunk * chunk; i < n; ++i) h = add_word(h, uint32_t(prompt[size_t(i)]));
  return finish(add_word(h, uint64_t(n)));
}

}  // namespace

PrefixCache::PrefixCache(Model& model, const PrefixCacheOptions& o, int chunk)
    : model_(model), budget_(o.bytes), every_(o.every == 0 ? chunk : o.every), chunk_(chunk) {
  check(chunk >= 1, "prefix cache: the prefill chunk must be at least 1, found ", chunk);
  check(o.bytes >= 0, "prefix cache: the byte budget must not be negative, found ", o.bytes);
  check(o.every >= 0 && every_ % chunk == 0, "prefix cache: checkpoints every ", o.every,
        " tokens must be 0 or a positive multiple of the prefill chunk (", chunk, ")");
}

PrefixCache::~PrefixCache() = default;

uint64_t PrefixCache::key(const std::vector<int32_t>& prompt, int64_t n) const {
  return key_at(block_chain(prompt, n, chunk_), prompt, n, chunk_);
}

PrefixCache::List::iterator PrefixCache::lookup_key(uint64_t k, const std::vector<int32_t>& prompt, int64_t n) {
  auto [lo, hi] = index_.equal_range(k);
  for (auto it = lo; it != hi; ++it) {
    const Entry& e = *it->second;
    if (int64_t(e.tokens.size()) == n && std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin()))
      return it->second;
  }
  return lru_.end();
}

PrefixCache::Hit PrefixCache::find(const std::vector<int32_t>& prompt) {
  Hit hit;
  const int64_t L = int64_t(prompt.size());
  if (budget_ == 0 || lru_.empty() || L == 0) return hit;
  const std::vector<uint64_t> chain = block_chain(prompt, L, chunk_);
  auto take = [&](List::iterator it) {
    lru_.splice(lru_.begin(), lru_, it);  // most recently used
    hit.snapshot = it->snapshot.get();
    hit.tokens = int64_t(it->tokens.size());
    hit.logits = hit.tokens == L ? &it->logits : nullptr;
    return hit;
  };
  // The end of these very tokens first (it needs no pass), then the grid points below the end.
  if (auto it = lookup_key(key_at(chain, prompt, L, chunk_), prompt, L); it != lru_.end() && !it->logits.empty())
    return take(it);
  for (int64_t n = (L - 1) / chunk_ * chunk_; n > 0; n -= chunk_)
    if (auto it = lookup_key(key_at(chain, prompt, n, chunk_), prompt, n); it != lru_.end()) return take(it);
  return hit;
}

void PrefixCache::offer(const Sequence& seq, const std::vector<int32_t>& prompt, const std::vector<float>& logits) {
  const int64_t n = seq.pos, L = int64_t(prompt.size());
  check(n >= 1 && n <= L, "prefix cache: a sequence at position ", n, " offered for a prompt of ", L, " tokens");
  const bool end = n == L, grid = n % every_ == 0;
  if (budget_ == 0 || (!end && !grid)) return;
  const uint64_t k = key(prompt, n);
  if (auto it = lookup_key(k, prompt, n); it != lru_.end()) {
    lru_.splice(lru_.begin(), lru_, it);
    return;
  }
  Entry e;
  e.key = k;
  e.tokens.assign(prompt.begin(), prompt.begin() + long(n));
  if (end) e.logits = logits;
  e.snapshot = model_.snapshot(seq);
  e.bytes = int64_t(e.snapshot->bytes() + e.tokens.size() * sizeof(int32_t) + e.logits.size() * sizeof(float));
  if (e.bytes > budget_) return;  // larger than the whole budget: dropped (its memory goes back now)
  while (bytes_.load() + e.bytes > budget_) evict_back();
  bytes_ += e.bytes;
  ++entries_;
  lru_.push_front(std::move(e));
  index_.emplace(k, lru_.begin());
}

void PrefixCache::evict_back() {
  auto last = std::prev(lru_.end());
  auto [lo, hi] = index_.equal_range(last->key);
  for (auto it = lo; it != hi; ++it)
    if (it->second == last) {
      index_.erase(it);
      break;
    }
  bytes_ -= last->bytes;
  --entries_;
  ++evictions_;
  lru_.erase(last);
}

}  // namespace tandem
