// Drafter settings from a profile's draft.<name> mapping, read by the drafter's factory, and the
// drafter list of a profile or a command line.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tandem/error.h"
#include "tandem/draft_options.h"

namespace tandem {

double TokenDist::prob(int32_t id) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id) return probs[i];
  return 0.0;
}

SpeculatorSettings::SpeculatorSettings(std::string source, std::string path, std::map<std::string, std::string> values)
    : source_(std::move(source)), path_(std::move(path)), values_(std::move(values)) {}

std::string SpeculatorSettings::key(const std::string& k) const {
  return (source_.empty() ? "" : source_ + ": ") + "key '" + (path_.empty() ? k : path_ + "." + k) + "'";
}

int64_t SpeculatorSettings::integer(const std::string& k, int64_t fallback, int64_t lo, int64_t hi) {
  read_.insert(k);
  auto it = values_.find(k);
  if (it == values_.end()) return fallback;
  const std::string& v = it->second;
  char* end = nullptr;
  errno = 0;
  long long r = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || r < lo || r > hi)
    fail(key(k), " must be an integer in [", lo, ", ", hi, "], found '", v, "'");
  return int64_t(r);
}

double SpeculatorSettings::number(const std::string& k, double fallback, double lo, double hi) {
  read_.insert(k);
  auto it = values_.find(k);
  if (it == values_.end()) return fallback;
  const std::string& v = it->second;
  char* end = nullptr;
  double r = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(r) || r < lo || r > hi)
    fail(key(k), " must be a number in [", lo, ", ", hi, "], found '", v, "'");
  return r;
}

bool SpeculatorSettings::flag(const std::string& k, bool fallback) {
  read_.insert(k);
  auto it = values_.find(k);
  if (it == values_.end()) return fallback;
  if (it->second == "true") return true;
  if (it->second == "false") return false;
  fail(key(k), " must be true or false, found '", it->second, "'");
}

std::string SpeculatorSettings::text(const std::string& k, const std::string& fallback) {
  read_.insert(k);
  auto it = values_.find(k);
  if (it == values_.end()) return fallback;
  if (it->second.empty()) fail(key(k), " must be a non-empty string, found ''");
  return it->second;
}

void SpeculatorSettings::finish() const {
  for (const auto& kv : values_)
    if (!read_.count(kv.first)) {
      std::string list;
      for (const auto& r : read_) list += (list.empty() ? "" : ", ") + r;
      fail((source_.empty() ? "" : source_ + ": "), "unknown key '", path_.empty() ? kv.first : path_ + "." + kv.first,
           "' (expected one of: ", list.empty() ? "none" : list, ")");
    }
}

std::vector<std::string> parse_drafter_names(const std::string& list) {
  if (list == "none") return {};
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = list.find(',', start);
    std::string n = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    n.erase(0, n.find_first_not_of(" \t"));
    n.erase(n.find_last_not_of(" \t") + 1);
    check(!n.empty(), "drafter list '", list, "': empty name (expected NAME[,NAME...] or none)");
    check(n != "none", "drafter list '", list, "': 'none' cannot be combined with drafters");
    check(std::find(out.begin(), out.end(), n) == out.end(), "drafter list '", list, "': '", n, "' is named twice");
    out.push_back(n);
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

}  // namespace tandem
