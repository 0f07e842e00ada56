// MlxFormat and MlxConverter: glue from the plugin interfaces to the reader and the writer.
#include "mlx_format.h"

#include <filesystem>

#include "mlx_checkpoint.h"
#include "mlx_writer.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/registry.h"

namespace tandem::mlx {
namespace fs = std::filesystem;

int MlxFormat::probe_path(const std::string& path) const { return probe_folder(path); }

std::unique_ptr<Checkpoint> MlxFormat::open(const std::string& path) const { return open_folder(path); }

std::unique_ptr<QuantizedTensor> MlxFormat::load(const TensorGroup& group, Backend& backend) const {
  (void)backend;
  fail("mlx: the MLX format loads no tensors itself (its checkpoint presents GGML blocks for the gguf format); asked "
       "for ", group.describe());
}

void MlxConverter::validate(const ConvertRequest& r) const {
  check(!r.input.empty() && !r.output.empty(), "tandem convert --to mlx: expected MODEL.gguf and OUTPUT_DIR");
}

void MlxConverter::convert(const ConvertRequest& r, ConvertHost& host) const {
  check(r.calibration.empty(), "tandem convert --to mlx: --calibration has no use (the conversion is a transcode)");
  const std::string out = fs::path(r.output).lexically_normal().string();
  if (fs::exists(out)) {
    check(fs::is_directory(out), "tandem convert: output '", out, "' exists and is not a directory");
    check(fs::is_empty(out) || r.force, "tandem convert: output '", out,
          "' exists and is not empty (pass --force to replace it)");
  }
  LoadOptions lo;
  lo.path = r.input;
  lo.format = "gguf";
  std::unique_ptr<Checkpoint> in = open_checkpoint(lo, host.registry());
  const std::string partial = out + ".partial";
  fs::remove_all(partial);
  write_mlx_folder(*in, partial);
  fs::remove_all(out);
  fs::rename(partial, out);
}

}  // namespace tandem::mlx
