// Converting a checkpoint into a format (TANDEM_KIND_CONVERTER): `tandem convert --to NAME` finds
// the converter by name. The converter owns everything about its format (which tensors to quantize,
// the quantizer, the output's layout and files); the executable lends it what needs a running model
// (calibration) and the plugins (a Writer for the container) through ConvertHost.
// Owner: the caller owns the request and the host for the call. Thread: one caller; a converter may
// fan out over the core's worker pool. Sync: the output is complete when convert() returns.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace tandem {

class Checkpoint;
class PluginRegistry;

// A linear's input Hessian XᵀX / rows, from running the model over a calibration text.
struct Hessian {
  int64_t in = 0;
  int64_t rows = 0;        // rows seen; 0 = none (converters then use the identity)
  std::vector<float> h;    // in × in
};

struct Calibration {
  std::map<std::string, Hessian> hessians;  // by linear (group prefix, "backbone.layers.0.mixer.in_proj")
  int64_t tokens = 0;                       // tokens run
  int sequences = 0;
};

// What the executable lends a converter.
class ConvertHost {
 public:
  virtual ~ConvertHost() = default;
  virtual PluginRegistry& registry() = 0;
  // The input checkpoint (a folder the host opened), alive for the host's lifetime.
  virtual const Checkpoint& input() = 0;
  // Runs the input model over `text` (its own tokenizer; the first `max_tokens` tokens, in sequences
  // of at most `sequence_tokens`) and returns the Hessians of `linears`. Errors: no tokenizer, no tokens.
  virtual Calibration calibrate(const std::string& text, const std::set<std::string>& linears, int64_t max_tokens,
                                int64_t sequence_tokens) = 0;
};

struct ConvertRequest {
  std::string input, output;                   // folders
  std::map<std::string, std::string> options;  // --name VALUE for the names options() lists
  std::string calibration;                     // a text file, or empty
  int64_t rows = 0;                            // calibration tokens; 0 = the converter's default
  uint64_t seed = 0;
  bool force = false;                          // replace a non-empty output or a stale partial one
};

// One --option of a converter, as `tandem convert --help` lists it.
struct ConverterOption {
  std::string name;   // without the leading --
  std::string value;  // its argument, e.g. "B"
  std::string help;   // one line
};

class Converter {
 public:
  virtual ~Converter() = default;
  // The --options this converter reads beyond the common ones (--to, --calibration, --rows, --seed,
  // --threads, --force, INPUT_DIR OUTPUT_DIR).
  virtual std::vector<ConverterOption> options() const = 0;
  // Checks the request's options before any work (one-line errors naming the option).
  virtual void validate(const ConvertRequest& request) const = 0;
  // Converts; progress on stderr. Errors name the file, tensor or option.
  virtual void convert(const ConvertRequest& request, ConvertHost& host) const = 0;
};

}  // namespace tandem
