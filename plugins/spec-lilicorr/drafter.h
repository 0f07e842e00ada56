// The lilicorr speculator: DFlash block drafts from the target's tapped hidden states, reranked by the
// LiLiCorr head when the checkpoint has one (spec/lilicorr.md, spec/speculation.md § 2.3).
// The drafter math runs on the host in fp32 (CPU reference): taps are copied to host memory with
// Backend::download, and the target's embedding rows and LM head run on the target's backend through
// SpeculatorContext, so the same code serves a CPU or a CUDA target; CUDA kernels for the backbone
// and head are the next step.
// Owner: the factory keeps one DrafterWeights per checkpoint path, shared by its drafters; a drafter owns
// its sequence's context cache. Thread: the engine thread. Sync: propose() returns host tokens; the
// downloads synchronize with the target's stream.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "tandem/backend.h"
#include "tandem/speculator.h"

namespace tandem::lilicorr {

// What the last propose() computed, kept for tests and the reference comparison
// (tools/reference/lilicorr_oracle.sh): the block's normed rows 1 … B − 1 [S, H]; with a head, the
// candidates [S, K] (ids, slot-major), their log-probabilities [S, K], the scores and the walk.
struct BlockTrace {
  int64_t start = 0;            // the anchor's position (= context rows)
  std::vector<float> rows;      // [S, H]
  std::vector<int32_t> cand;    // [S, K]
  std::vector<float> logp;      // [S, K]
  HeadScores scores;
  std::vector<int> path;        // [S]
};

class LiliDrafter : public Speculator {
 public:
  LiliDrafter(const SpeculatorContext& ctx, std::shared_ptr<const DrafterWeights> w);
  void begin(const int32_t* prompt, size_t n) override;
  void observe(const int32_t* tokens, size_t n) override;
  std::vector<int> hidden_layers() const override { return w_->backbone.c.target_layers; }
  void observe_prompt(const TargetHidden& hidden) override;
  void observe_hidden(const int32_t* tokens, size_t n, const TargetHidden& hidden) override;
  void propose(int max_n, Draft& out) override;

  // The full block's drafts (B − 1 tokens) of the last propose(), and the context cache (tests).
  const std::vector<int32_t>& last_block() const { return block_; }
  const ContextCache& cache() const { return cache_; }
  const BlockTrace& last_trace() const { return trace_; }

 private:
  void take(const TargetHidden& h);
  void flush();  // projects the pending feature rows into the context cache
  // rows [n, H] on the host → logits [n, vocab] on the host through the target's LM head.
  void lm_head(const std::vector<float>& rows, int64_t n, std::vector<float>& logits);

  SpeculatorContext ctx_;
  std::shared_ptr<const DrafterWeights> w_;
  ContextCache cache_;
  std::vector<float> pending_;  // [rows, taps·H]: committed rows not projected yet
  int64_t pending_rows_ = 0;
  int64_t fed_ = 0;             // positions whose states arrived
  int64_t committed_ = 0;       // tokens committed (prompt included)
  int32_t last_ = -1;           // the last committed token (the next block's anchor)
  std::vector<int32_t> block_;
  BlockTrace trace_;
  std::vector<float> host_;     // staging for taps
  std::unique_ptr<Buffer> rows_dev_, logits_dev_, emb_dev_;
};

class LiliFactory : public SpeculatorFactory {
 public:
  std::unique_ptr<Speculator> create(const SpeculatorContext& context, SpeculatorSettings& settings) override;
  void synthesize(const std::string& path, const ModelDesc& target, SpeculatorSettings& settings,
                  uint64_t seed) override;

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const DrafterWeights>> loaded_;  // kept for the factory's life
};

}  // namespace tandem::lilicorr
