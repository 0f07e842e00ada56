// One byte of the JSON-schema automaton. Whitespace policy: none anywhere, except one optional
// space after ':' and after ','. Every state reached has a way to finish, so masked decoding ends
// in a valid value (given single-byte tokens).
#include <algorithm>

#include "json_schema.h"

namespace tandem::json {
namespace {

enum Result { kReject, kConsumed, kConsumedPop, kPopReprocess, kPushReprocess };

// Digit caps keep numbers inside int64 / finite doubles (a validator must be able to read them).
constexpr uint32_t kMaxIntDigits = 18;
constexpr uint32_t kMaxFracDigits = 18;
constexpr uint32_t kMaxExpDigits = 2;

constexpr uint32_t kFreeKey = 0x80000000u;  // Frame::b of an object in a free-form property name

enum ObjectSt : uint16_t { kObjStart, kObjOpen, kObjKey, kObjColon, kObjAfterColon, kObjValueSp, kObjAfterValue, kObjComma, kObjCommaSp };
enum ArraySt : uint16_t { kArrStart, kArrOpen, kArrAfterValue, kArrComma, kArrCommaSp };
enum StringSt : uint16_t { kStrStart, kStrIn };
enum NumberSt : uint16_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp };

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

bool push(MatchState& s, uint32_t node) {
  if (s.depth == kMaxFrames) return false;
  s.frames[s.depth++] = Frame{node, 0, 0, 0, 0, 0, 0};
  return true;
}

// Bytes inside a string after the opening quote. `sub` is the StrSub; returns the next one, or -1.
// `starts_char` tells the caller a new character began (for length limits).
int string_byte(uint8_t sub, uint8_t c, bool& starts_char) {
  starts_char = false;
  if (sub == kUtf8None) {
    if (c < 0x20 || c == '"') return -1;
    starts_char = true;
    if (c == '\\') return kEsc;
    return utf8_step(kUtf8None, c);
  }
  if (sub < kEsc) return utf8_step(sub, c);
  switch (sub) {
    case kEsc:
      if (c == 'u') return kHex0;
      return (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
                 ? kUtf8None : -1;
    case kHex0:
      if (c == 'd' || c == 'D') return kHex1D;
      return is_hex(c) ? kHex1 : -1;
    case kHex1D: return (c >= '0' && c <= '7') ? kHex2 : -1;
    case kHex1: return is_hex(c) ? kHex2 : -1;
    case kHex2: return is_hex(c) ? kHex3 : -1;
    case kHex3: return is_hex(c) ? kUtf8None : -1;
  }
  return -1;
}

Result step_string(const Node& n, Frame& f, uint8_t c) {
  if (f.st == kStrStart) {
    if (c != '"') return kReject;
    f.st = kStrIn;
    return kConsumed;
  }
  if (f.b == kUtf8None && c == '"') return f.a >= n.min_len ? kConsumedPop : kReject;
  bool starts_char;
  int next = string_byte(uint8_t(f.b), c, starts_char);
  if (next < 0) return kReject;
  if (starts_char && n.counted()) {
    if (f.a >= n.max_len) return kReject;
    ++f.a;
  }
  f.b = uint32_t(next);
  return kConsumed;
}

Result step_number(Frame& f, bool integer, uint8_t c) {
  const bool digit = is_digit(c);
  switch (f.st) {
    case kNumStart:
      if (c == '-') {
        f.st = kNumMinus;
        return kConsumed;
      }
      [[fallthrough]];
    case kNumMinus:
      if (c == '0') {
        f.st = kNumZero;
        return kConsumed;
      }
      if (!digit) return kReject;
      f.st = kNumInt;
      f.a = 1;
      return kConsumed;
    case kNumZero: break;
    case kNumInt:
      if (digit) {
        if (f.a >= kMaxIntDigits) return kReject;
        ++f.a;
        return kConsumed;
      }
      break;
    case kNumDot:
      if (!digit) return kReject;
      f.st = kNumFrac;
      f.a = 1;
      return kConsumed;
    case kNumFrac:
      if (digit) {
        if (f.a >= kMaxFracDigits) return kReject;
        ++f.a;
        return kConsumed;
      }
      if (c == 'e' || c == 'E') {
        f.st = kNumE;
        return kConsumed;
      }
      return kPopReprocess;
    case kNumE:
      if (c == '+' || c == '-') {
        f.st = kNumESign;
        return kConsumed;
      }
      [[fallthrough]];
    case kNumESign:
      if (!digit) return kReject;
      f.st = kNumExp;
      f.a = 1;
      return kConsumed;
    case kNumExp:
      if (digit) {
        if (f.a >= kMaxExpDigits) return kReject;
        ++f.a;
        return kConsumed;
      }
      return kPopReprocess;
  }
  // after the integer part
  if (!integer) {
    if (c == '.') {
      f.st = kNumDot;
      return kConsumed;
    }
    if (c == 'e' || c == 'E') {
      f.st = kNumE;
      return kConsumed;
    }
  }
  return kPopReprocess;
}

Result step_literal(const Grammar& g, const Node& n, Frame& f, uint8_t c) {
  if (f.st == 0) {
    f.st = 1;
    f.a = n.lit_trie;
  }
  const TrieNode& t = g.trie[f.a];
  int64_t child = t.child(c);
  if (child < 0) return t.terminal >= 0 ? kPopReprocess : kReject;
  const TrieNode& ct = g.trie[size_t(child)];
  if (ct.terminal >= 0 && ct.edges.empty()) return kConsumedPop;
  f.a = uint32_t(child);
  return kConsumed;
}

// Object cursor: properties before f.a were written or skipped. A property p may come next iff
// f.a ≤ p ≤ the next required one; extra names only once no required property is left.
struct Cursor {
  uint32_t n, lo, hi;  // allowed declared range [lo, hi] (empty when lo ≥ n)
  bool extras;
  bool any_declared() const { return lo < n; }
};

Cursor cursor(const Node& n, uint32_t a) {
  Cursor c;
  c.n = uint32_t(n.props.size());
  c.lo = a;
  uint32_t nr = a < c.n ? n.next_required[a] : c.n;
  c.hi = nr == c.n ? (c.n ? c.n - 1 : 0) : nr;
  c.extras = n.extra >= 0 && nr == c.n;
  return c;
}

bool reaches(const TrieNode& t, const Cursor& cur) {
  if (!cur.any_declared()) return false;
  auto it = std::lower_bound(t.below.begin(), t.below.end(), cur.lo);
  return it != t.below.end() && *it <= cur.hi;
}

bool no_required_left(const Node& n, uint32_t a) { return a >= n.props.size() || n.next_required[a] == n.props.size(); }

constexpr uint32_t kHashSeed = 2166136261u;  // FNV-1a
uint32_t hash_byte(uint32_t h, uint8_t c) { return (h ^ c) * 16777619u; }

Result step_key(const Grammar& g, KeySets& keys, const Node& n, Frame& f, uint8_t c) {
  const Cursor cur = cursor(n, f.a);
  auto end_key_extra = [&] {
    if (keys.contains(f.keys, f.hash)) return kReject;  // written already in this object
    f.keys = keys.add(f.keys, f.hash);
    f.hash = 0;
    f.a = cur.n;
    f.b = uint32_t(n.extra);
    f.st = kObjColon;
    return kConsumed;
  };
  if (f.b & kFreeKey) {
    uint8_t sub = uint8_t(f.b);
    if (sub == kUtf8None && c == '"') return end_key_extra();
    if (sub == kUtf8None && (c == '\\' || c < 0x20)) return kReject;
    int next = utf8_step(sub, c);
    if (next < 0) return kReject;
    f.b = kFreeKey | uint32_t(next);
    f.hash = hash_byte(f.hash, c);
    return kConsumed;
  }
  const TrieNode& t = g.trie[f.b];
  // An edge first: a '"' edge only follows a backslash inside a declared name.
  int64_t child = t.child(c);
  if (child >= 0) {
    const TrieNode& ct = g.trie[size_t(child)];
    if (reaches(ct, cur) || (cur.extras && ct.free_state != kNoFree)) {
      f.b = uint32_t(child);
      f.hash = hash_byte(f.hash, c);
      return kConsumed;
    }
    return kReject;
  }
  if (c == '"') {
    if (t.terminal >= 0) {
      uint32_t p = uint32_t(t.terminal);
      if (!cur.any_declared() || p < cur.lo || p > cur.hi) return kReject;
      f.a = p + 1;
      f.b = n.props[p].value;
      f.hash = 0;
      f.st = kObjColon;
      return kConsumed;
    }
    if (cur.extras && t.free_state == kUtf8None) return end_key_extra();
    return kReject;
  }
  if (!cur.extras || t.free_state == kNoFree) return kReject;
  if (t.free_state == kUtf8None && (c == '\\' || c < 0x20)) return kReject;
  int next = utf8_step(t.free_state, c);
  if (next < 0) return kReject;
  f.b = kFreeKey | uint32_t(next);
  f.hash = hash_byte(f.hash, c);
  return kConsumed;
}

Result step_object(const Grammar& g, KeySets& keys, const Node& n, MatchState& s, Frame& f, uint8_t c) {
  switch (f.st) {
    case kObjStart:
      if (c != '{') return kReject;
      f.st = kObjOpen;
      return kConsumed;
    case kObjOpen:
    case kObjAfterValue:
      if (c == '}') return no_required_left(n, f.a) ? kConsumedPop : kReject;
      if (f.st == kObjOpen && c == '"') break;
      if (f.st == kObjAfterValue && c == ',') {
        Cursor cur = cursor(n, f.a);
        if (!cur.any_declared() && !cur.extras) return kReject;
        f.st = kObjComma;
        return kConsumed;
      }
      return kReject;
    case kObjComma:
      if (c == ' ') {
        f.st = kObjCommaSp;
        return kConsumed;
      }
      [[fallthrough]];
    case kObjCommaSp:
      if (c == '"') break;
      return kReject;
    case kObjKey: return step_key(g, keys, n, f, c);
    case kObjColon:
      if (c != ':') return kReject;
      f.st = kObjAfterColon;
      return kConsumed;
    case kObjAfterColon:
      if (c == ' ') {
        f.st = kObjValueSp;
        return kConsumed;
      }
      [[fallthrough]];
    case kObjValueSp:
      f.st = kObjAfterValue;
      return push(s, f.b) ? kPushReprocess : kReject;
    default: return kReject;
  }
  // '"' opens a property name
  Cursor cur = cursor(n, f.a);
  if (!cur.any_declared() && !cur.extras) return kReject;
  f.st = kObjKey;
  f.b = n.key_trie;
  f.hash = kHashSeed;
  return kConsumed;
}

Result step_array(const Node& n, MatchState& s, Frame& f, uint8_t c) {
  switch (f.st) {
    case kArrStart:
      if (c != '[') return kReject;
      f.st = kArrOpen;
      return kConsumed;
    case kArrOpen:
      if (c == ']') return n.min_items == 0 ? kConsumedPop : kReject;
      if (n.max_items == 0) return kReject;
      break;
    case kArrAfterValue:
      if (c == ']') return f.a >= n.min_items ? kConsumedPop : kReject;
      if (c != ',' || f.a >= n.max_items) return kReject;
      f.st = kArrComma;
      return kConsumed;
    case kArrComma:
      if (c == ' ') {
        f.st = kArrCommaSp;
        return kConsumed;
      }
      break;
    case kArrCommaSp: break;
    default: return kReject;
  }
  ++f.a;
  f.st = kArrAfterValue;
  return push(s, n.items) ? kPushReprocess : kReject;
}

}  // namespace

MatchState initial_state(const Grammar& g) {
  MatchState s;
  push(s, g.root);
  return s;
}

bool step(const Grammar& g, KeySets& keys, MatchState& s, uint8_t c) {
  for (;;) {
    if (s.depth == 0) return false;
    Frame& f = s.frames[s.depth - 1];
    const Node& n = g.nodes[f.node];
    Result r = kReject;
    switch (n.kind) {
      case Kind::object: r = step_object(g, keys, n, s, f, c); break;
      case Kind::array: r = step_array(n, s, f, c); break;
      case Kind::string: r = step_string(n, f, c); break;
      case Kind::number: r = step_number(f, false, c); break;
      case Kind::integer: r = step_number(f, true, c); break;
      case Kind::literal: r = step_literal(g, n, f, c); break;
      case Kind::choice: {
        int32_t alt = n.first[c];
        if (alt < 0) return false;
        f = Frame{uint32_t(alt), 0, 0, 0, 0, 0, 0};
        r = kPushReprocess;
        break;
      }
    }
    switch (r) {
      case kReject: return false;
      case kConsumed: return true;
      case kConsumedPop: --s.depth; return true;
      case kPopReprocess: --s.depth; break;
      case kPushReprocess: break;
    }
  }
}

bool accepting(const Grammar& g, const MatchState& s) {
  if (s.depth == 0) return true;
  if (s.depth > 1) return false;
  const Frame& f = s.frames[0];
  const Node& n = g.nodes[f.node];
  switch (n.kind) {
    case Kind::number:
    case Kind::integer:
      return f.st == kNumZero || f.st == kNumInt || f.st == kNumFrac || f.st == kNumExp;
    case Kind::literal: return f.st == 1 && g.trie[f.a].terminal >= 0;
    default: return false;
  }
}

bool KeySets::contains(uint32_t set, uint32_t hash) const {
  for (uint32_t e = set; e != 0; e = entries_[e].parent)
    if (entries_[e].hash == hash) return true;
  return false;
}

uint32_t KeySets::add(uint32_t set, uint32_t hash) {
  auto [it, fresh] = index_.try_emplace((uint64_t(set) << 32) | hash, uint32_t(entries_.size()));
  if (fresh) entries_.push_back({hash, set});
  return it->second;
}

uint32_t plain_capacity(const Grammar& g, const MatchState& s) {
  if (s.depth == 0) return 0;
  const Frame& f = s.frames[s.depth - 1];
  const Node& n = g.nodes[f.node];
  if (n.kind == Kind::string && f.st == kStrIn && f.b == kUtf8None)
    return n.counted() ? (n.max_len == kUnbounded ? kUnbounded : n.max_len - f.a) : kUnbounded;
  return (n.kind == Kind::object && f.st == kObjKey && f.b == kFreeKey) ? kUnbounded : 0;
}

bool step_is_identity(const Grammar& g, const MatchState& s, uint8_t c) {
  if (s.depth == 0 || c < 0x20 || c >= 0x80 || c == '"' || c == '\\') return false;
  const Frame& f = s.frames[s.depth - 1];
  const Node& n = g.nodes[f.node];
  return n.kind == Kind::string && f.st == kStrIn && f.b == kUtf8None && !n.counted();
}

}  // namespace tandem::json
