// The MLX WeightFormat (container side only) and the `mlx` converter. The format opens MLX folders
// (mlx_checkpoint.h) into GGML-block tensors and claims no tensor groups itself: the gguf format
// plugins run what it presents. The converter (`tandem convert --to mlx MODEL.gguf OUT_DIR`) writes
// an MLX folder from a GGUF file (mlx_writer.h).
// Owner: checkpoints it returns belong to the caller. Thread: const methods from any thread. Sync: none.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tandem/converter.h"
#include "tandem/weights.h"

namespace tandem::mlx {

class MlxFormat final : public WeightFormat {
 public:
  int probe_path(const std::string& path) const override;
  std::unique_ptr<Checkpoint> open(const std::string& path) const override;
  int probe_group(const TensorGroup& group) const override { (void)group; return 0; }
  // Never called (probe_group claims nothing); an error if it is.
  std::unique_ptr<QuantizedTensor> load(const TensorGroup& group, Backend& backend) const override;
};

// Input: a GGUF file (opened by the "gguf" format through the host's registry). No options and no
// calibration: the conversion is a transcode. Output: a new folder (an existing non-empty one only
// with --force), written as OUTPUT.partial and renamed when complete.
class MlxConverter final : public Converter {
 public:
  std::vector<ConverterOption> options() const override { return {}; }
  void validate(const ConvertRequest& request) const override;
  void convert(const ConvertRequest& request, ConvertHost& host) const override;
};

}  // namespace tandem::mlx
