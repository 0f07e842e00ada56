// A synthetic model as a Checkpoint with no file behind it, so the normal loaders upload it (tandem
// bench --synth). Its RawTensors carry the names, types and shapes the container's own reader would
// give them (gguf-iq2: GgufCheckpoint's HF names with experts split and ssm_a as A; bf16, exl3-2,
// nvfp4: the safetensors names), and their bytes point into host memory made here:
// - linear weights and embeddings of one type and row length share one pool of random rows, each
//   tensor starting at its own random row, so the pool holds the largest such tensor plus a margin,
//   not every tensor (Bolt gguf-iq2: about 2 GB of host memory instead of 22 GB);
// - vectors (norms, conv, A, D, dt_bias, correction biases, NVFP4 scales, ModelOpt's per-tensor
//   scales, which follow each weight's std) are made one by one.
// Tensors that share a pool repeat each other's values; that changes no byte counts or timings.
// Owner: the checkpoint owns its pools; RawTensors point into them. Thread: build on one thread, then
// read from any. Sync: none.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "synth_plan.h"
#include "tandem/weights.h"

namespace tandem::synth {

class SynthCheckpoint final : public Checkpoint {
 public:
  // `label` names it in path() ("synth:bolt/gguf-iq2"). Generates every pool (all worker threads).
  SynthCheckpoint(Plan plan, uint64_t seed, std::string label);

  std::string path() const override { return label_; }
  std::string config_json() const override;
  const std::vector<RawTensor>& tensors() const override { return tensors_; }
  const RawTensor* find(const std::string& name) const override;

  const Plan& plan() const { return plan_; }
  // Host memory the checkpoint holds (pools and vectors).
  size_t host_bytes() const { return host_bytes_; }

 private:
  void add_views(const StoredTensor& t, const uint8_t* data);

  Plan plan_;
  std::string label_;
  std::vector<std::unique_ptr<uint8_t[]>> memory_;
  std::vector<RawTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  size_t host_bytes_ = 0;
};

// The host memory a SynthCheckpoint of `plan` would hold, without making it.
size_t synth_host_bytes(const Plan& plan);

}  // namespace tandem::synth
