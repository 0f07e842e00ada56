// Prefix checkpoints: copies of a sequence's whole state (Model::snapshot: Mamba2 states, conv
// windows, K/V rows) taken during prefill, keyed by the tokens before them, in an LRU store under a
// byte budget. A request whose prompt extends a stored prefix restores the longest usable copy and
// prefills only the rest, and computes the bits of a cold run: checkpoints sit only where a cold
// run's prefill passes split anyway (multiples of the prefill chunk from position 0, every `every`
// tokens), plus one at the end of each prompt, which only a prompt of exactly those tokens may use
// (it keeps that pass's logits, so such a request runs no prefill pass at all).
// Owner: the SlotScheduler owns one, shared by its slots; it borrows the Model (which must outlive
// it) and owns its snapshots. Thread: the engine thread (the thread that drives the Model), except
// bytes() and entries(), which any thread may read. Sync: snapshots are queued in stream order
// (Backend::copy); nothing here synchronizes.
#pragma once
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tandem/model.h"

namespace tandem {

struct PrefixCacheOptions {
  int64_t bytes = 0;  // budget for snapshots, logits and token keys; 0 = off
  int64_t every = 0;  // tokens between checkpoints: a multiple of the prefill chunk; 0 = every chunk
};

class TANDEM_API PrefixCache {
 public:
  // `chunk`: the prefill chunk of every Generation that uses this cache (its passes split there).
  // Errors: a negative budget, `every` negative or not a multiple of `chunk`.
  PrefixCache(Model& model, const PrefixCacheOptions& options, int chunk);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Hit {
    const SequenceSnapshot* snapshot = nullptr;  // valid until the next offer() (it may evict)
    const std::vector<float>* logits = nullptr;  // the last prompt position's logits, when tokens == prompt size
    int64_t tokens = 0;
  };
  // The longest stored prefix of `prompt` that resumes it exactly: a grid checkpoint shorter than
  // the prompt, or the end-of-prompt checkpoint of these very tokens. Marks it most recently used.
  Hit find(const std::vector<int32_t>& prompt);
  // Called after each committed prefill pass of `prompt` (seq.pos tokens of it are in `seq`, the
  // pass's last-row logits in `logits`): stores a checkpoint when seq.pos is on the grid or is the
  // prompt's end, evicting the least recently used entries to stay within the budget. A checkpoint
  // already stored is only marked used.
  void offer(const Sequence& seq, const std::vector<int32_t>& prompt, const std::vector<float>& logits);

  int chunk() const { return chunk_; }
  int64_t budget() const { return budget_; }
  int64_t bytes() const { return bytes_.load(); }      // held now
  int64_t entries() const { return entries_.load(); }
  int64_t evictions() const { return evictions_; }    // engine thread

 private:
  struct Entry {
    uint64_t key = 0;
    std::vector<int32_t> tokens;
    std::unique_ptr<SequenceSnapshot> snapshot;
    std::vector<float> logits;  // non-empty: the checkpoint is at the end of its prompt
    int64_t bytes = 0;
  };
  using List = std::list<Entry>;  // most recently used first
  // The hash of prompt[0, n) (a chain over chunk-sized blocks, then the tail and n).
  uint64_t key(const std::vector<int32_t>& prompt, int64_t n) const;
  // The entry of exactly prompt[0, n) under hash k, or lru_.end().
  List::iterator lookup_key(uint64_t k, const std::vector<int32_t>& prompt, int64_t n);
  void evict_back();

  Model& model_;
  int64_t budget_, every_;
  int chunk_;
  List lru_;
  std::unordered_multimap<uint64_t, List::iterator> index_;
  std::atomic<int64_t> bytes_{0}, entries_{0};
  int64_t evictions_ = 0;
};

}  // namespace tandem
