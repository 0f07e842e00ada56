// Lookup drafter: an index of n_min-grams over the request's tokens; per step, the earlier
// occurrences of the current suffix are extended backwards to find the longest match.
#include "lookup.h"

#include <algorithm>

#include "tandem/error.h"

namespace tandem::lookup {

LookupParams read_params(SpeculatorSettings& s) {
  LookupParams p;
  p.n_min = int(s.integer("n_min", p.n_min, 1, 64));
  p.n_max = int(s.integer("n_max", std::max(p.n_max, p.n_min), p.n_min, 256));
  p.max_draft = int(s.integer("max_draft", p.max_draft, 1, 255));
  p.min_matches = int(s.integer("min_matches", p.min_matches, 1, 64));
  p.max_candidates = int(s.integer("max_candidates", p.max_candidates, p.min_matches, 1 << 20));
  s.finish();
  return p;
}

LookupDrafter::LookupDrafter(const LookupParams& p) : p_(p) {
  check(p_.n_min >= 1 && p_.n_max >= p_.n_min && p_.max_draft >= 1 && p_.min_matches >= 1 &&
            p_.max_candidates >= p_.min_matches,
        "lookup drafter: need 1 <= n_min <= n_max, max_draft >= 1, 1 <= min_matches <= max_candidates");
}

uint64_t LookupDrafter::key(size_t end) const {
  uint64_t k = 0x9e3779b97f4a7c15ull;
  for (size_t i = end + 1 - size_t(p_.n_min); i <= end; ++i) {
    k ^= uint64_t(uint32_t(h_[i])) + 0x9e3779b97f4a7c15ull + (k << 6) + (k >> 2);
    k *= 0xbf58476d1ce4e5b9ull;
  }
  return k;
}

void LookupDrafter::append(int32_t t) {
  h_.push_back(t);
  if (h_.size() >= size_t(p_.n_min)) ends_[key(h_.size() - 1)].push_back(int32_t(h_.size() - 1));
}

void LookupDrafter::begin(const int32_t* prompt, size_t n) {
  h_.clear();
  ends_.clear();
  last_match_ = 0;
  h_.reserve(n + 1024);
  for (size_t i = 0; i < n; ++i) append(prompt[i]);
}

void LookupDrafter::observe(const int32_t* tokens, size_t n) {
  for (size_t i = 0; i < n; ++i) append(tokens[i]);
}

void LookupDrafter::propose(int max_n, Draft& out) {
  out.clear();
  last_match_ = 0;
  const size_t L = h_.size();
  if (max_n <= 0 || L <= size_t(p_.n_min)) return;
  auto it = ends_.find(key(L - 1));
  if (it == ends_.end()) return;
  const std::vector<int32_t>& ends = it->second;  // its last entry is the suffix itself

  // Match lengths of the most recent earlier occurrences (hash collisions match fewer than n_min).
  std::vector<std::pair<int, size_t>> found;  // (length, end), most recent first
  int examined = 0;
  for (size_t c = ends.size(); c-- > 0 && examined < p_.max_candidates;) {
    const size_t e = size_t(ends[c]);
    if (e + 1 >= L) continue;
    ++examined;
    int len = 0;
    while (len < p_.n_max && size_t(len) <= e && h_[e - size_t(len)] == h_[L - 1 - size_t(len)]) ++len;
    if (len >= p_.n_min) found.push_back({len, e});
  }
  if (found.size() < size_t(p_.min_matches)) return;
  // The longest length that min_matches occurrences reach; its most recent occurrence proposes.
  std::vector<int> lens;
  for (const auto& f : found) lens.push_back(f.first);
  std::nth_element(lens.begin(), lens.begin() + (p_.min_matches - 1), lens.end(), std::greater<int>());
  const int n = lens[size_t(p_.min_matches - 1)];
  size_t src = 0;
  for (const auto& f : found)
    if (f.first >= n) {
      src = f.second + 1;
      break;
    }
  // Copy what followed; a continuation that runs into the present repeats the proposal itself
  // (a period shorter than the draft).
  const int len = std::min(max_n, p_.max_draft);
  for (int i = 0; i < len; ++i) {
    size_t s = src + size_t(i);
    out.tokens.push_back(s < L ? h_[s] : out.tokens[s - L]);
  }
  last_match_ = n;
  out.bucket = n < 4 ? 0 : n < 8 ? 1 : n < 16 ? 2 : 3;
}

std::unique_ptr<Speculator> LookupFactory::create(const SpeculatorContext&, SpeculatorSettings& settings) {
  return std::make_unique<LookupDrafter>(read_params(settings));
}

}  // namespace tandem::lookup
