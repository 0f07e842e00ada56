// YAML model profiles (configs/*.yaml): which files, format, device and options to run with.
// Owner: value type. Thread: any. Sync: none. Every key is validated: an unknown key or a wrong type
// is an error naming the key and the file.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/backend.h"
#include "tandem/model.h"
#include "tandem/draft_options.h"

namespace tandem {

// The `server:` section: settings of `tandem serve`. Unset fields keep the server's defaults;
// command-line flags win over what is set here.
struct ServerProfile {
  std::optional<std::string> host;
  std::optional<int> port;
  std::optional<std::vector<std::string>> api_keys;  // `api_key`: a string or a list
  std::optional<std::string> api_key_file;          // resolved against the YAML's folder
  std::optional<std::string> metrics_key;
  std::optional<std::string> served_model_name;
  std::optional<std::vector<std::string>> aliases;  // a string or a list
  std::optional<int> slots, max_queue, default_max_tokens, prefill_chunk;
  // Tokens an engine step runs: decode rows, then whole prefill chunks (0 = one chunk a step).
  std::optional<int> step_tokens;
  std::optional<int> batch_rows;  // rows of the decoding slots' passes per forward: 1 … Model::batch_max_rows
  std::optional<int64_t> max_body_bytes;
  // Prefix checkpoints (schedulers/slots prefix_cache.h): their byte budget (0 = off) and the tokens
  // between them (a multiple of prefill_chunk; 0 = every chunk).
  std::optional<int64_t> prefix_cache_bytes, prefix_cache_every;
  std::optional<double> queue_timeout, drain_timeout, sse_ping_interval;  // seconds
  std::optional<bool> strict_fields;
  std::optional<int64_t> reasoning_budget;           // -1 = unlimited
  std::optional<std::string> reasoning_budget_message;
  std::optional<std::string> reasoning_effort;       // default thinking mode: none … max (spec/server.md §10.3)
  // true: special-token text in user and tool messages becomes control tokens (the unsafe old
  // behaviour, for clients that rely on it); default false: it is tokenized as ordinary text.
  std::optional<bool> special_tokens_in_user_content;
};

struct Profile {
  std::string source;          // the YAML file, "" when built from flags
  LoadOptions load;            // model path (relative paths resolve against the YAML's folder), format, device
  int64_t context = 4096;      // tokens per sequence
  int max_tokens = 256;        // default generation length
  SamplingParams sampling;     // default sampling
  std::string chat_template;   // a Jinja file that replaces the model's own template ("" = the model's)
  std::string tokenizer;       // a tokenizer.json that replaces the model's own ("" = the model's)
  ServerProfile server;
  // draft: {drafters: [lookup], lookup: {...}, staircut: {...}}; each drafter's own keys are
  // checked by its factory when the drafters are created (tandem::Drafting).
  DraftOptions draft;
};

TANDEM_API Profile load_profile(const std::string& yaml_path);
// Parses YAML text; `source` names it in errors and anchors relative paths.
TANDEM_API Profile parse_profile(const std::string& yaml_text, const std::string& source);

}  // namespace tandem
