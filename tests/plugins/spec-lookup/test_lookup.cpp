// Lookup drafter: the longest-suffix / most-recent rule against a brute-force reference on random
// sequences, the periodic continuation, incremental indexing, settings and the plugin entry.
#include <gtest/gtest.h>

#include <random>

#include "lookup.h"
#include "tandem/error.h"
#include "tandem/registry.h"
#include "test_util.h"

using namespace tandem;
using lookup::LookupDrafter;
using lookup::LookupParams;

namespace {

std::vector<int32_t> propose(const std::vector<int32_t>& h, const LookupParams& p, int max_n, int* bucket = nullptr) {
  LookupDrafter d(p);
  d.begin(h.data(), h.size());
  Draft out;
  d.propose(max_n, out);
  if (bucket) *bucket = out.bucket;
  return out.tokens;
}

// The rule written plainly: for every earlier end e (most recent first, the first max_candidates
// whose last n_min tokens equal the suffix's), the match length capped at n_max; the
// min_matches-th largest length n must reach n_min; the most recent e with length >= n proposes.
std::vector<int32_t> reference(const std::vector<int32_t>& h, const LookupParams& p, int max_n) {
  const int L = int(h.size());
  if (L <= p.n_min) return {};
  std::vector<std::pair<int, int>> found;
  int examined = 0;
  for (int e = L - 2; e >= p.n_min - 1 && examined < p.max_candidates; --e) {
    int len = 0;
    while (len < p.n_max && e - len >= 0 && h[size_t(e - len)] == h[size_t(L - 1 - len)]) ++len;
    if (len < p.n_min) continue;
    ++examined;
    found.push_back({len, e});
  }
  if (int(found.size()) < p.min_matches) return {};
  std::vector<int> lens;
  for (auto& f : found) lens.push_back(f.first);
  std::sort(lens.rbegin(), lens.rend());
  const int n = lens[size_t(p.min_matches - 1)];
  int src = -1;
  for (auto& f : found)
    if (f.first >= n) {
      src = f.second + 1;
      break;
    }
  std::vector<int32_t> seq = h;
  std::vector<int32_t> out;
  for (int i = 0; i < std::min(max_n, p.max_draft); ++i) {
    out.push_back(seq[size_t(src + i)]);
    seq.push_back(out.back());
  }
  return out;
}

TEST(Lookup, ContinuesTheMostRecentLongestMatch) {
  LookupParams p;
  //                          0  1  2  3  4  5  6  7  8  9 10 11 12 13
  std::vector<int32_t> h = {5, 6, 7, 1, 9, 6, 7, 2, 3, 4, 5, 6, 7};
  // Suffix "5 6 7" matches at 0..2 (length 3); "6 7" alone at 5..6 is more recent but shorter.
  int bucket = -1;
  EXPECT_EQ(propose(h, p, 4, &bucket), (std::vector<int32_t>{1, 9, 6, 7}));
  EXPECT_EQ(bucket, 0);  // match length 3: bucket 2–3
  // Without the 5 in front, both are length 2 and the most recent wins.
  h[10] = 8;
  EXPECT_EQ(propose(h, p, 4), (std::vector<int32_t>{2, 3, 4, 8}));
}

TEST(Lookup, NeedsNMinTokensOfMatch) {
  std::vector<int32_t> h = {1, 2, 3, 4, 9, 3};
  LookupParams p;
  EXPECT_TRUE(propose(h, p, 5).empty()) << "a one-token match is not enough for n_min 2";
  p.n_min = 1;
  EXPECT_EQ(propose(h, p, 2), (std::vector<int32_t>{4, 9}));
}

TEST(Lookup, MinMatchesCountsEarlierOccurrences) {
  std::vector<int32_t> h = {1, 2, 7, 1, 2, 8, 3, 1, 2};
  LookupParams p;
  p.min_matches = 2;
  EXPECT_EQ(propose(h, p, 1), (std::vector<int32_t>{8}));
  p.min_matches = 3;
  EXPECT_TRUE(propose(h, p, 1).empty());
}

TEST(Lookup, PeriodicContinuationAndCaps) {
  std::vector<int32_t> h = {4, 1, 2, 3, 1, 2, 3};
  LookupParams p;
  EXPECT_EQ(propose(h, p, 7), (std::vector<int32_t>{1, 2, 3, 1, 2, 3, 1}));
  p.max_draft = 2;
  EXPECT_EQ(propose(h, p, 7), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(propose(h, p, 0).empty());
  EXPECT_TRUE(propose({1, 2}, p, 3).empty());
}

TEST(Lookup, BucketsByMatchLength) {
  LookupParams p;
  p.n_max = 64;
  for (auto [n, want] : {std::pair{2, 0}, {3, 0}, {4, 1}, {7, 1}, {8, 2}, {15, 2}, {16, 3}, {40, 3}}) {
    std::vector<int32_t> h;
    for (int i = 0; i < n; ++i) h.push_back(100 + i);
    h.push_back(7);
    h.push_back(99);  // breaks the match one token further back
    for (int i = 0; i < n; ++i) h.push_back(100 + i);
    int bucket = -1;
    ASSERT_FALSE(propose(h, p, 1, &bucket).empty()) << n;
    EXPECT_EQ(bucket, want) << "match length " << n;
  }
}

TEST(Lookup, MatchesTheReferenceOnRandomSequences) {
  std::mt19937 g(3);
  int proposed = 0;
  for (int trial = 0; trial < 400; ++trial) {
    LookupParams p;
    p.n_min = 1 + int(g() % 3);
    p.n_max = p.n_min + int(g() % 6);
    p.max_draft = 1 + int(g() % 10);
    p.min_matches = 1 + int(g() % 2);
    p.max_candidates = std::max(p.min_matches, 1 + int(g() % 8));
    const int vocab = 2 + int(g() % 6), len = 1 + int(g() % 120);
    std::vector<int32_t> h;
    for (int i = 0; i < len; ++i) h.push_back(int32_t(g() % uint32_t(vocab)));
    // Built incrementally (begin + observe in pieces), as the loop does.
    LookupDrafter d(p);
    size_t cut = size_t(g() % (h.size() + 1));
    d.begin(h.data(), cut);
    while (cut < h.size()) {
      size_t n = std::min(h.size() - cut, size_t(1 + g() % 5));
      d.observe(h.data() + cut, n);
      cut += n;
    }
    Draft out;
    const int max_n = 1 + int(g() % 12);
    d.propose(max_n, out);
    ASSERT_EQ(out.tokens, reference(h, p, max_n)) << "trial " << trial;
    proposed += !out.tokens.empty();
  }
  EXPECT_GT(proposed, 200);
}

TEST(Lookup, SettingsAreValidated) {
  SpeculatorSettings ok("/cfg/p.yaml", "draft.lookup", {{"n_min", "3"}, {"n_max", "9"}, {"max_draft", "12"}, {"min_matches", "2"}});
  LookupParams p = lookup::read_params(ok);
  EXPECT_EQ(p.n_min, 3);
  EXPECT_EQ(p.n_max, 9);
  EXPECT_EQ(p.max_draft, 12);
  EXPECT_EQ(p.min_matches, 2);
  auto error = [](std::map<std::string, std::string> v) {
    SpeculatorSettings s("/cfg/p.yaml", "draft.lookup", std::move(v));
    try {
      lookup::read_params(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error({{"n_min", "0"}}), "/cfg/p.yaml: key 'draft.lookup.n_min' must be an integer in [1, 64], found '0'");
  EXPECT_EQ(error({{"n_min", "4"}, {"n_max", "3"}}),
            "/cfg/p.yaml: key 'draft.lookup.n_max' must be an integer in [4, 256], found '3'");
  EXPECT_EQ(error({{"max_draft", "2.5"}}),
            "/cfg/p.yaml: key 'draft.lookup.max_draft' must be an integer in [1, 255], found '2.5'");
  EXPECT_EQ(error({{"min_matches", ""}}),
            "/cfg/p.yaml: key 'draft.lookup.min_matches' must be an integer in [1, 64], found ''");
  EXPECT_EQ(error({{"n_mn", "2"}}), "/cfg/p.yaml: unknown key 'draft.lookup.n_mn' (expected one of: max_candidates, "
                                    "max_draft, min_matches, n_max, n_min)");
}

TEST(Lookup, PluginProvidesADeviceNeutralSpeculator) {
  PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  bool found = false;
  for (const auto& p : reg.providers())
    found |= p.kind == TANDEM_KIND_SPECULATOR && p.name == "lookup" && p.device.empty();
  ASSERT_TRUE(found);
  auto f = reg.speculator("lookup", "cuda");  // device-neutral: serves every device
  SpeculatorSettings s;
  auto d = f->create({256, nullptr}, s);
  EXPECT_TRUE(d->cheap());
  EXPECT_EQ(d->buckets(), 4);
  std::vector<int32_t> h = {1, 2, 3, 1, 2};
  d->begin(h.data(), h.size());
  Draft out;
  d->propose(2, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{3, 1}));
}

}  // namespace
