// The lilicorr speculator: DFlash block drafts from the target's tapped hidden states, reranked by the
// LiLiCorr head when the checkpoint has one (spec/lilicorr.md, spec/speculation.md § 2.3).
// The backbone runs on the target's backend (device_backbone.h: the target's formats and Backend ops,
// one code path for CPU and CUDA), then the target's LM head and the candidates' top-K (or the argmax)
// there too, then the head (device_head.h); only the candidates' ids and log-probabilities (one
// download) and the head's start/pair scores (one more) come back, and the greedy walk runs on the
// host. Committed rows wait in a backlog (copies of their taps) and enter the context in one batched
// catch-up at the next proposal, so steps that propose nothing (StairCut's k = 0) pay a copy only.
// The block pass with the candidates, and the head's lattice, are recorded as graphs on their second run
// and replayed (draft.lilicorr.graphs; the block's position is read from device memory), recorded
// again when the context cache is regrown or the memory epoch moves (docs/lilicorr.md, "What runs": Graphs).
// head.cpp and backbone.cpp are the fp32 host reference of the tests.
// Owner: the factory keeps one DrafterWeights per checkpoint path and one OnTarget per (checkpoint,
// target), shared by their drafters; a drafter owns its sequence's context cache.
// Thread: the engine thread. Sync: propose() returns host tokens; its downloads synchronize with the
// target's stream.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "device_backbone.h"
#include "device_head.h"
#include "tandem/backend.h"
#include "tandem/speculator.h"

namespace tandem::lilicorr {

// A checkpoint's weights loaded on one target's device.
// A drafter's own token table loaded by the target's formats (get_rows), with the bytes it may borrow.
struct DeviceTable {
  WeightSource src;
  DeviceLinear table;
};

struct OnTarget {
  std::shared_ptr<const DeviceWeights> backbone;
  std::shared_ptr<const DeviceHeadWeights> head;  // null without a head
  std::shared_ptr<const DeviceTable> embed;       // null: the block is embedded by the target's table
};

// How a drafter runs (draft.lilicorr.* settings).
struct DrafterOptions {
  int64_t head_rows = kHeadMatmulRows;  // rows per matmul call of the head (DeviceHead; 0 = all at once)
  bool defer = true;     // committed rows wait for the next proposal (false: projected as they arrive)
  bool profile = false;  // time each stage (stages()), synchronizing the device around each
  bool graphs = true;    // record the block pass and the head as graphs (where the backend records them)
};

// Rows of committed taps a drafter keeps before it projects them without a proposal: one chunk of
// DeviceBackbone::append, so a catch-up of up to this many rows reads the weights once.
constexpr int64_t kBacklogRows = kRowChunk;

// Each regrowth of the context cache (by doubling) and each move of the memory epoch (any ordinary
// buffer released, e.g. another sequence freed) records a drafter's graphs again. Past this many
// recordings, a drafter whose recordings were replayed fewer than twice each on average runs op by op
// for good: they do not last long enough to pay for recording.
constexpr int kJudgeRecordings = 16;

// What the drafter's graphs did (tests and benchmarks).
struct DrafterGraphStats {
  int64_t recorded = 0;  // graphs recorded (each also ran once)
  int64_t replayed = 0;  // launches of a recorded graph
  int64_t eager = 0;     // recordable parts run op by op (graphs off, or a first run)
  std::string off;       // why graphs are off ("" while on)
};

class LiliDrafter : public Speculator {
 public:
  LiliDrafter(const SpeculatorContext& ctx, std::shared_ptr<const DrafterWeights> w, const OnTarget& dw,
              const DrafterOptions& o = {});
  void begin(const int32_t* prompt, size_t n) override;
  void observe(const int32_t* tokens, size_t n) override;
  std::vector<int> hidden_layers() const override { return w_->backbone.c.target_layers; }
  void observe_prompt(const TargetHidden& hidden) override;
  void observe_hidden(const int32_t* tokens, size_t n, const TargetHidden& hidden) override;
  void propose(int max_n, Draft& out) override;
  // With DrafterOptions::profile: catch-up (rows: committed rows projected), block (the backbone over
  // the B rows), candidates (LM head and top-K), download (their ids and log-probabilities), head
  // (its scores' download included), and flush (a full backlog projected outside a proposal).
  std::vector<SpeculatorStage> stages() const override;

  // Of the last propose() (tests): the full block's drafts (B − 1 tokens), the candidates' ids and
  // log-probabilities [B − 1, K] (K = 1 without a head: the argmax), and the head's scores.
  const std::vector<int32_t>& last_block() const { return block_; }
  const std::vector<int32_t>& last_candidates() const { return cand_; }
  const std::vector<float>& last_logp() const { return logp_; }
  const HeadScores& last_scores() const { return scores_; }
  const std::vector<int>& last_path() const { return path_; }  // the head's walk (empty without a head)
  // The backbone rows [B − 1, H] of the last propose() and the anchor row [H], downloaded (tests).
  std::vector<float> backbone_rows() const;
  std::vector<float> anchor_row() const;
  int64_t context_rows() const { return dev_.rows(); }
  int64_t backlog_rows() const { return backlog_; }  // committed rows not yet in the context (tests)
  int64_t block_steps() const { return block_steps_; }  // block passes run so far (tests)
  const DrafterGraphStats& graph_stats() const { return graph_stats_; }

 private:
  enum Stage { kCatchUp, kBlock, kCandidates, kDownload, kHead, kFlush, kStages };
  // One recorded part of a proposal: the graph and the state its addresses belong to.
  struct Recording {
    bool cache = false;  // holds the context caches' addresses (the block pass)
    bool warm = false;   // ran once op by op (every scratch it needs has grown)
    std::unique_ptr<Graph> graph;
    uint64_t epoch = 0, generation = 0;  // Backend::memory_epoch(), DeviceBackbone::cache_generation()
  };
  // Runs `work` (recordable ops only) from r's graph, recording it on its second run; returns false,
  // having run nothing, when the caller must run it op by op (graphs off, or its first run).
  bool replay(Recording& r, const std::function<void()>& work);
  void graphs_off(const std::string& why);
  // Recordable parts of a proposal: the block pass (after its embedding and prepare_block), and the LM
  // head with top-K. (The third is DeviceHead::run.)
  void block_pass();
  void candidates();
  void take(const TargetHidden& h);
  // Projects the backlog into the context (one batched append).
  void catch_up(Stage as);
  // With profiling: waits for the device and charges the time since the last lap to stage s.
  void lap(Stage s, int64_t items = 0);

  SpeculatorContext ctx_;
  std::shared_ptr<const DrafterWeights> w_;
  std::shared_ptr<const DeviceTable> embed_;  // the checkpoint's own table, or null (the target's)
  DeviceBackbone dev_;
  std::unique_ptr<DeviceHead> head_;  // null without a head
  int64_t fed_ = 0;             // positions whose states arrived
  int64_t committed_ = 0;       // tokens committed (prompt included)
  int32_t last_ = -1;           // the last committed token (the next block's anchor)
  std::vector<int32_t> block_, cand_, both_;
  std::vector<float> logp_;
  std::vector<int> path_;
  HeadScores scores_;
  DrafterOptions opt_;
  std::vector<std::unique_ptr<Buffer>> backlog_dev_;  // per tap [kBacklogRows, H]
  int64_t backlog_ = 0;
  int64_t block_steps_ = 0;
  SpeculatorStage stage_[kStages];
  double lap_start_ = 0;
  // x, rows, logits, candidates' embeddings; out: the candidates' ids [S·K] int32 then their
  // log-probabilities [S·K] f32, side by side so that one download brings both.
  std::unique_ptr<Buffer> x_dev_, rows_dev_, logits_dev_, emb_dev_, out_dev_;
  // After every buffer they hold (destroyed first). Without profiling the block pass and the
  // candidates are one graph (rec_block_); with it, two (rec_block_, rec_cand_), timed apart.
  Recording rec_block_, rec_cand_, rec_head_;
  DrafterGraphStats graph_stats_;
  int dropped_ = 0;  // recordings dropped for allocating or releasing
};

class LiliFactory : public SpeculatorFactory {
 public:
  std::unique_ptr<Speculator> create(const SpeculatorContext& context, SpeculatorSettings& settings) override;
  void synthesize(const std::string& path, const ModelDesc& target, SpeculatorSettings& settings,
                  uint64_t seed) override;

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const DrafterWeights>> loaded_;  // kept for the factory's life
  // Per checkpoint and target (Model::serial()), also kept for the factory's life: a sequence's drafter
  // comes and goes, the weights on the device stay.
  std::map<std::pair<std::string, uint64_t>, OnTarget> on_target_;
};

}  // namespace tandem::lilicorr
