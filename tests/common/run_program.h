// Runs a program of the build tree (bin/NAME) through the shell: its exit status, stdout and stderr.
// Owner: value type and free function. Thread: any. Sync: waits for the program.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tandem::test {

struct ProgramRun {
  int status;
  std::string out, err;
};

inline ProgramRun run_program(const std::string& program, const std::string& args) {
  namespace fs = std::filesystem;
  fs::path err = fs::temp_directory_path() / ("tandem_test_err_" + std::to_string(::getpid()));
  std::string cmd = std::string(TANDEM_BINARY_DIR) + "/bin/" + program + " " + args + " 2>" + err.string();
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  std::ifstream ef(err);
  std::stringstream es;
  es << ef.rdbuf();
  fs::remove(err);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out, es.str()};
}

}  // namespace tandem::test
