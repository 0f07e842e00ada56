// A JSON schema compiled to a byte-level pushdown automaton: grammar nodes (one per schema
// position), small tries for property names and enum/const literals, and the matcher state.
// Owner: a Grammar is immutable once compiled and shared. Thread: any. Sync: none (read-only).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tandem/text/json_constraint.h"
#include "tandem/text/utf8.h"

namespace tandem::json {

enum class Kind : uint8_t { object, array, string, number, integer, literal, choice };

struct TrieNode {
  std::vector<std::pair<uint8_t, uint32_t>> edges;
  int32_t terminal = -1;        // key tries: property index; literal tries: 0
  uint8_t free_state = 0;       // key tries: string sub-state after this path (kNoFree after '\')
  std::vector<uint32_t> below;  // key tries: property indices ending at or under this node, sorted

  int64_t child(uint8_t c) const {
    for (const auto& e : edges)
      if (e.first == c) return e.second;
    return -1;
  }
};

struct Property {
  std::string name;
  uint32_t value;
  bool required;
};

inline constexpr uint32_t kUnbounded = 0xFFFFFFFFu;

struct Node {
  Kind kind = Kind::choice;
  bool is_any = false;  // accepts every JSON value (up to its depth): anyOf with it is it
  // object
  std::vector<Property> props;         // in schema order: the order they are written in
  std::vector<uint32_t> next_required;  // [i]: first required index ≥ i, or props.size()
  uint32_t key_trie = 0;
  int32_t extra = -1;  // node of additional property values; -1: none allowed
  // array
  uint32_t items = 0, min_items = 0, max_items = kUnbounded;
  // string
  uint32_t min_len = 0, max_len = kUnbounded;
  bool counted() const { return min_len > 0 || max_len != kUnbounded; }
  // literal: canonical JSON texts and their trie
  std::vector<std::string> literals;
  uint32_t lit_trie = 0;
  // choice: its alternatives, and the one a value's first byte picks (-1 = none)
  std::vector<uint32_t> alts;
  std::vector<int32_t> first;
};

struct Grammar {
  std::vector<Node> nodes;
  std::vector<TrieNode> trie;
  uint32_t root = 0;
};

// String sub-states, shared by string values and free-form property names.
enum StrSub : uint8_t {
  kUtf8None = 0,  // 1..7: inside a multi-byte UTF-8 character (utf8_step)
  kEsc = 8,
  kHex0 = 9,    // \u, no digit yet
  kHex1D = 10,  // \uD: the next digit must be 0-7 (no surrogate escapes)
  kHex1 = 11,
  kHex2 = 12,
  kHex3 = 13,
  kNoFree = 0xFF,
};

// utf8_step (tandem/text/utf8.h) gives the sub-state after a byte inside a string's UTF-8
// stream; from kUtf8None, ASCII stays kUtf8None (the caller rejects '"', '\' and controls).

// Deep enough for any schema we compile (checked) and the default free-form depth.
inline constexpr uint32_t kMaxFrames = 32;

struct Frame {
  uint32_t node;
  uint16_t st;
  uint16_t pad;
  uint32_t a;
  uint32_t b;
  uint32_t keys;  // object: id of the set of additional names written so far (KeySets)
  uint32_t hash;  // object: hash of the property name being written
};

// Additional property names already written in an object, as sets of name hashes interned so that
// one set has one id (0 = empty) for the owner's lifetime; that keeps ids valid in mask-cache keys.
// A hash collision refuses a new name that differs (the name can still grow), never admits a repeat.
class KeySets {
 public:
  bool contains(uint32_t set, uint32_t hash) const;
  uint32_t add(uint32_t set, uint32_t hash);

 private:
  struct Entry {
    uint32_t hash, parent;
  };
  std::vector<Entry> entries_ = {{0, 0}};
  std::unordered_map<uint64_t, uint32_t> index_;
};

struct MatchState {
  uint32_t depth = 0;
  std::array<Frame, kMaxFrames> frames;

  void copy_from(const MatchState& o) {
    depth = o.depth;
    for (uint32_t i = 0; i < depth; ++i) frames[i] = o.frames[i];
  }
};

MatchState initial_state(const Grammar& g);
// Advances by one byte; false (state then unspecified) when the byte cannot continue a match.
bool step(const Grammar& g, KeySets& keys, MatchState& s, uint8_t c);
// The bytes so far form a whole value (a root number or literal may still grow).
bool accepting(const Grammar& g, const MatchState& s);
// Printable ASCII other than the quote and the backslash: text that cannot end or escape a string.
inline bool is_plain_byte(uint8_t c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }
// How many plain bytes in a row the state takes while staying inside the same string value or
// additional property name (kUnbounded, or what a maxLength leaves; 0 elsewhere): every token of
// at most that many plain bytes is allowed here.
uint32_t plain_capacity(const Grammar& g, const MatchState& s);
// True when byte c leaves the state unchanged (plain text in an unbounded string value): the mask
// walk then shares the parent's state instead of copying it.
bool step_is_identity(const Grammar& g, const MatchState& s, uint8_t c);

// Throws tandem::Error naming the keyword and its location for what is not supported.
std::shared_ptr<const Grammar> compile_schema(std::string_view schema_json);
std::shared_ptr<const Grammar> any_object_grammar(uint32_t max_depth);

}  // namespace tandem::json
