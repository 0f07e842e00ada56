// tandem-make-tiny-chat-model DIR TEMPLATE.jinja [--api-key K]: writes the tiny chat model and DIR.yaml
// (the e2e test's first step; also handy for trying `tandem serve` by hand). Without --api-key the
// profile sets no key, so the server it describes needs none.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tiny_chat_model.h"

namespace {

const char* kUsage =
    "usage: tandem-make-tiny-chat-model DIR CHAT_TEMPLATE.jinja [--api-key K]\n"
    "  writes a tiny random chat model into DIR and its profile into DIR.yaml\n"
    "  --api-key K   the profile's server.api_key (default: none, the server needs no key)\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string api_key;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--api-key") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: --api-key needs a value\n%s", kUsage);
        return 2;
      }
      api_key = argv[++i];
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "error: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) {
    std::fprintf(stderr, "error: expected DIR and CHAT_TEMPLATE.jinja, found %zu arguments\n%s", positional.size(), kUsage);
    return 2;
  }
  try {
    auto m = tandem::test::write_tiny_chat_model(positional[0], positional[1], api_key);
    std::printf("%s\n", m.profile.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
