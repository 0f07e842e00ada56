// Constrained decoding for response_format json_object / json_schema (server spec §11): a byte-level
// automaton compiled from the schema, walked against a trie of the vocabulary to mask tokens.
// Owner: ConstraintVocab and JsonSchema are immutable and shared (one per model / per request);
// a JsonConstraint is one request's matcher. Thread: ConstraintVocab and JsonSchema any; a
// JsonConstraint and its copies the request's thread. Sync: none.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/plugin_abi.h"

namespace tandem {

namespace json {
struct Grammar;
}  // namespace json

// A vocabulary as byte strings (token id → its decoded bytes; empty for special tokens, which are
// never allowed) plus the EOS ids, allowed once the value is complete. Build once per model.
class TANDEM_API ConstraintVocab {
 public:
  ConstraintVocab(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids);
  size_t size() const;
  const std::vector<int32_t>& eos_ids() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

// A compiled schema. Supported: type (and type arrays), properties, required, additionalProperties
// (default true, as JSON Schema), enum, const, items, minItems/maxItems, minLength/maxLength,
// anyOf/oneOf whose alternatives differ by JSON type, allOf of one schema, local $ref/$defs without
// recursion. Annotations (title, description, default, examples, $schema, $id, $comment, ...) are
// ignored; every other keyword (pattern, format, minimum, ...) throws tandem::Error naming it and
// where it is. Properties are written in the order the schema lists them; free-form values
// (no schema, json_object) nest at most 8 deep; additional property names have no backslashes.
// Output whitespace: none, except one optional space after ':' and after ','.
class TANDEM_API JsonSchema {
 public:
  static JsonSchema compile(std::string_view schema_json);
  // json_object mode: any object, nesting at most `max_depth` containers deep.
  static JsonSchema any_object(uint32_t max_depth = 8);

  const std::shared_ptr<const json::Grammar>& grammar() const { return grammar_; }

 private:
  explicit JsonSchema(std::shared_ptr<const json::Grammar> g) : grammar_(std::move(g)) {}
  std::shared_ptr<const json::Grammar> grammar_;
};

// The matcher: which tokens may come next, and advancing by the chosen one. Copies are cheap forks
// (for drafts); a copy shares its mask cache with the original, so keep both on one thread.
class TANDEM_API JsonConstraint {
 public:
  JsonConstraint(JsonSchema schema, ConstraintVocab vocab);
  ~JsonConstraint();
  JsonConstraint(const JsonConstraint&);
  JsonConstraint& operator=(const JsonConstraint&);
  JsonConstraint(JsonConstraint&&) noexcept;
  JsonConstraint& operator=(JsonConstraint&&) noexcept;

  // mask[id] = 1 when token id may come next (resized to the vocabulary). Once complete(), only EOS
  // (and, for a root number, more digits); after EOS was accepted, nothing.
  void allowed(std::vector<uint8_t>& mask) const;
  std::vector<int32_t> allowed_tokens() const;

  // Advances by one token; false (state unchanged) when the token is not allowed.
  bool accept(int32_t token);
  // Advances by raw bytes (tests, forced text); false (state unchanged) when they cannot follow.
  bool accept_bytes(std::string_view bytes);

  bool complete() const;  // a whole value matching the schema was produced
  bool finished() const;  // EOS was accepted
  size_t tokens_accepted() const;
  // Undoes the last n accepted tokens (rejected drafts).
  void rollback(size_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
