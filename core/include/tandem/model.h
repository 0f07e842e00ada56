// A loaded Nemotron-H model and its per-sequence state: one forward path for prefill, decode and
// verify, then commit(n).
// Owner: the Model owns its checkpoint, weights, mixers and backend reference; a Sequence owns its
// layer states and must not outlive the Model. Thread: one thread drives a Model at a time.
// Sync: forward() returns host logits, so it waits for the device at its end; nothing inside does.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/backend.h"
#include "tandem/layer.h"
#include "tandem/model_config.h"

namespace tandem {

class PluginRegistry;
class Checkpoint;
class QuantizedTensor;
struct TensorGroup;

struct LoadOptions {
  std::string path;              // HF folder, a .safetensors file, or a file another format reads
  std::string format = "auto";   // container plugin, or "auto" (highest probe_path score)
  std::string device = "cpu";
  int threads = 0;               // 0 = all cores
  std::string mamba;             // layer plugin for M layers; "" = the one loaded (PluginRegistry::layer_for)
  bool hf_prefill_dt_clamp = false;  // clamp Δ ≥ time_step_min in prefill, as HF transformers does
  // Optional: called on the loading thread with the fraction loaded (0 … 1) after each layer.
  std::function<void(double)> progress;
  // Optional: the backend to run on instead of the registry's for `device` (its device() must be
  // `device`), e.g. a test's wrapper that counts what the model allocates.
  std::shared_ptr<Backend> backend;
};

struct Sequence {
  int64_t pos = 0;        // tokens committed
  int64_t capacity = 0;   // most tokens it can hold
  std::vector<std::unique_ptr<LayerState>> states;
  bool pending = false;   // a forward ran that was not committed yet
  ForwardInfo last;
  std::shared_ptr<void> graphs;  // the Model's recorded verify passes of this sequence (opaque)
  size_t bytes() const;
};

// A copy of a Sequence's committed state (Model::snapshot) after its first `pos` tokens: one
// LayerState copy per layer, in the model's backend memory, sized for `pos` tokens (attention keeps
// K/V rows 0 … pos−1 only). Owner: whoever took it; it must not outlive the Model.
struct SequenceSnapshot {
  int64_t pos = 0;
  std::vector<std::unique_ptr<LayerState>> states;
  size_t bytes() const;
};

// Backend graphs of verify passes (see Model::forward): what happened since the model was loaded.
struct GraphStats {
  bool enabled = false;     // graphs may be recorded (switched on and not given up)
  int64_t captured = 0;     // passes recorded
  int64_t replayed = 0;     // passes run from a recording (the first run of each included)
  int64_t eager = 0;        // verify passes run op by op
  std::string off_reason;   // why graphs are off, when they are
  // By rows n: the nodes of the last graph replayed for a pass of n rows (Graph::kernel_nodes,
  // copy_nodes; -1 = not counted by the backend). Absent: no pass of n rows was replayed.
  struct Launches {
    int64_t kernels = -1, copies = -1;
  };
  std::map<int, Launches> launches;
};

// Weight bytes one decode step reads, by part (Model::decode_parts); they sum to Model::decode_bytes().
struct DecodeParts {
  size_t embedding = 0;              // one row of the embedding
  std::vector<size_t> layers;        // layer i: its norm and mixer, top_k experts of a MoE layer
  size_t head = 0;                   // the final norm and the LM head
};

// Opens options.path with the format plugin named by options.format, or with the one whose
// probe_path scores highest ("auto"). `format_name` (optional) receives the plugin's name.
TANDEM_API std::unique_ptr<Checkpoint> open_checkpoint(const LoadOptions& options, PluginRegistry& registry,
                                                       std::string* format_name = nullptr);

// One weight of `checkpoint` loaded alone, as the model loader groups it (the tensor named `name` and
// those named `name.*`: an EXL3 linear's prefix, or a GGUF or safetensors tensor's full name), on
// `backend` by the format of `registry` that claims the group best (its name into `format_name`).
// Shapes are as stored (no TensorGroup::shape). Errors: nothing has that name or prefix (the message
// lists the closest names); no format claims the group.
TANDEM_API std::unique_ptr<QuantizedTensor> load_tensor(const Checkpoint& checkpoint, const std::string& name,
                                                        PluginRegistry& registry, Backend& backend,
                                                        std::string* format_name = nullptr);

class TANDEM_API Model {
 public:
  static std::unique_ptr<Model> load(const LoadOptions& options, PluginRegistry& registry);
  // A checkpoint opened elsewhere (e.g. a synthetic one built in memory); options.path and
  // options.format are not used. `format_name` is what format_name() reports.
  static std::unique_ptr<Model> load(std::unique_ptr<Checkpoint> checkpoint, const std::string& format_name,
                                     const LoadOptions& options, PluginRegistry& registry);
  ~Model();

  const ModelDesc& desc() const { return desc_; }
  Backend& backend() { return *backend_; }
  const std::string& format_name() const { return format_name_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // Bytes of weights one decode step reads: every weight except the routed experts and the embedding,
  // plus top_k experts of each MoE layer and one embedding row (from the loaded tensors' bytes()).
  size_t decode_bytes() const { return decode_bytes_; }
  const DecodeParts& decode_parts() const { return decode_parts_; }
  // Bytes of state layer i moves in a decode step at position pos: a Mamba layer reads and writes its
  // fp32 SSM state (nh·P·N·4 bytes each way; the small conv window is left out); an attention layer
  // reads the f32 K and V rows of positions 0 … pos (2·nkv·hd·4 bytes a row). 0 for MoE and MLP layers.
  size_t decode_state_bytes(size_t layer, int64_t pos) const;

  std::unique_ptr<Sequence> new_sequence(int64_t max_tokens) const;
  // Runs `tokens` at positions seq.pos …; writes logits (f32, host) of every position
  // ([n, vocab]) or of the last one only ([vocab]). The state stays as committed until commit().
  void forward(Sequence& seq, const std::vector<int32_t>& tokens, ForwardMode mode,
               std::vector<float>& logits, bool all_positions);
  // forward() then commit() of every token, with the commit's work queued behind the pass before the
  // logits are read back, so the host queues it while the device runs the pass (prefill, and plain
  // decode, where nothing is rejected). The same results as forward() followed by commit(seq, n).
  void forward_commit(Sequence& seq, const std::vector<int32_t>& tokens, ForwardMode mode,
                      std::vector<float>& logits, bool all_positions);
  // Accepts the first n tokens of the last forward.
  void commit(Sequence& seq, int n_accepted);
  // Prefix checkpoints. snapshot(): a copy of seq's committed state (no pass may be pending), in new
  // detached memory of backend() (Backend::alloc_detached: freeing it keeps recorded graphs).
  // restore(): writes a snapshot into `seq` (no pass pending, capacity ≥ snap.pos), which then
  // continues bit for bit as the snapshotted sequence would have (seq.pos = snap.pos); the snapshot
  // stays valid for further restores. Both queue Backend::copy work in stream order and do not
  // synchronize; every layer's mixer must support it (Mixer::snapshot).
  std::unique_ptr<SequenceSnapshot> snapshot(const Sequence& seq) const;
  void restore(const SequenceSnapshot& snap, Sequence& seq) const;


  // One verify pass of several sequences (the busy slots of a server step): each BatchPass's tokens
  // run at positions seq.pos …, its logits go to *logits as forward() would write them, and each
  // sequence is left pending until its own commit(seq, n). The rows are the passes' tokens
  // concatenated; whatever does not depend on a sequence (embedding, norms, MoE and MLP layers, the
  // projections of Mamba2 and attention layers, the LM head) runs once on all rows, so the weights are
  // read once per step, and only the per-sequence core of a stateful mixer (Mixer::forward_batch)
  // runs per sequence. Bit-exact: every sequence's logits equal forward() of it alone, because every
  // kernel's result for a row does not depend on the other rows of a pass of at most
  // batch_max_rows rows (the verify regime: the same row limit as graph_max_tokens, above which
  // matmuls may switch to tiled kernels). One pass runs as forward() (graphs included); several run
  // op by op the first time, from graphs the Model keeps per batch shape (the sequences, their rows
  // and all_positions) after that. Taps hold the batch's rows in order (tap(j): [total rows, hidden]).
  // Errors: no passes, a sequence twice, a pass of no tokens, more than batch_max_rows rows in
  // several passes (one pass may be longer), and forward()'s own checks (context, token ids), naming
  // the pass.
  struct BatchPass {
    Sequence* seq = nullptr;
    std::vector<int32_t> tokens;
    bool all_positions = false;
    std::vector<float>* logits = nullptr;  // out: [n, vocab] or [vocab]
  };
  static constexpr int batch_max_rows = 16;
  void forward_batch(const std::vector<BatchPass>& passes);
  // Model passes run since the load (forward, forward_commit and forward_batch each count one), for
  // tests and benchmarks that check how many passes a step took.
  int64_t passes() const;
  // Optional (benchmarks, tests): called from forward() with -1 after the embedding, i after layer i
  // and n_layers after the head, before the logits are downloaded, with the pass's residual stream x
  // [n, hidden] (f32 on backend(); after the head it still holds the last layer's output). Nothing
  // synchronizes for it. While an observer is set, passes run op by op (no graphs).
  void set_forward_observer(std::function<void(int stage, const Tensor& x)> observer);

  // What a drafter reads of the target (SpeculatorContext), on backend(): the token embedding
  // [vocab, hidden] (get_rows), the LM head [vocab, hidden] (matmul; the embedding when tied) and the
  // final norm's weights [hidden] in device memory (Backend::rms_norm with desc().eps): logits =
  // lm_head · rms_norm(x after the last layer).
  const QuantizedTensor& embedding() const;
  const QuantizedTensor& lm_head() const;
  const float* final_norm() const;
  // A weight that is not the model's (a drafter's own layer), loaded on backend() by the best claim of
  // the formats the model was loaded with. The group's RawTensors must outlive the result (a host
  // weight may point into them). Error: no format claims the group.
  std::unique_ptr<QuantizedTensor> load_weight(const TensorGroup& group) const;
  // A number no other Model of this process has had (1, 2, …): what a drafter keys the weights it
  // loaded for this model by, where an address could be a later model's.
  uint64_t serial() const { return serial_; }

  // Taps: each forward() copies the residual stream after each layer of `layers` (x after layer i's
  // residual add: what layer i + 1 reads) for every row of the pass into buffers the Model owns. The
  // copies are ops of the pass, so a recorded verify pass records them and its replays refill the same
  // buffers; no extra pass runs. Buffers for graph_max_tokens rows are allocated here, longer passes
  // (prefills) grow them before they run. Setting taps drops the recorded passes. Empty: no copies.
  // taps() is `layers` sorted, without repeats; a layer outside [0, n_layers) is an error.
  void set_taps(std::vector<int> layers);
  const std::vector<int>& taps() const;
  // The copy of layer taps()[j] from the last forward (any sequence): [n of that pass, hidden], f32
  // on backend(); row r is the pass's r-th token (position seq.pos + r, seq.pos as the pass began).
  // Valid until the next forward.
  Tensor tap(size_t j) const;

  // Verify passes of up to graph_max_tokens tokens run from backend graphs (CUDA graphs): the first
  // pass of a shape (sequence, n, all_positions) runs op by op, the second is recorded, later ones
  // replay it: the same kernels with the same arguments, so the logits are bit-identical. A backend
  // that cannot record, or a pass that cannot be recorded, runs op by op (logged once). On at load
  // when the backend says so (Backend::graphs_off_reason(); the CUDA backend's TANDEM_CUDA_GRAPHS=0
  // says no); set_graphs(false) switches it off, set_graphs(true) on.
  static constexpr int graph_max_tokens = 16;
  void set_graphs(bool on);
  const GraphStats& graph_stats() const;

 private:
  Model();
  // forward() up to the logits: queues the pass and returns the device logits tensor.
  Tensor queue_pass(Sequence& seq, const std::vector<int32_t>& tokens, ForwardMode mode, bool all_positions);
  // Queues checked passes (one of either mode, or several verify passes) as one forward: their rows
  // concatenated; returns the device logits, whose rows for pass b start at head_off[b].
  Tensor queue_passes(const std::vector<BatchPass>& passes, ForwardMode mode, std::vector<int64_t>& head_off);
  // Checks a pass of `tokens` on `seq` (`what` names it in errors).
  void check_pass(const Sequence& seq, const std::vector<int32_t>& tokens, const std::string& what) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ModelDesc desc_;
  std::shared_ptr<Backend> backend_;
  std::string format_name_;
  size_t weight_bytes_ = 0;
  size_t decode_bytes_ = 0;
  uint64_t serial_ = 0;
  DecodeParts decode_parts_;
};

}  // namespace tandem
