// YAML model profiles (configs/*.yaml): which files, format, device and options to run with.
// Owner: value type. Thread: any. Sync: none. Every key is validated: an unknown key or a wrong type
// is an error naming the key and the file.
#pragma once
#include <cstdint>
#include <string>

#include "tandem/backend.h"
#include "tandem/model.h"

namespace tandem {

struct Profile {
  std::string source;          // the YAML file, "" when built from flags
  LoadOptions load;            // model path (relative paths resolve against the YAML's folder), format, device
  int64_t context = 4096;      // tokens per sequence
  int max_tokens = 256;        // default generation length
  SamplingParams sampling;     // default sampling
};

TANDEM_API Profile load_profile(const std::string& yaml_path);
// Parses YAML text; `source` names it in errors and anchors relative paths.
TANDEM_API Profile parse_profile(const std::string& yaml_text, const std::string& source);

}  // namespace tandem
