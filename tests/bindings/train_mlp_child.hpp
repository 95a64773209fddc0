#pragma once
// zoe-train-mlp as a child process whose stdout is read line by line, so that a test can kill it
// with SIGKILL at a chosen point: after a given line, or at a moment of its choosing. Shared by
// train_mlp_test.cpp and train_mlp_soak_test.cpp.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "train_mlp_support.hpp"

extern char** environ;

namespace zoe::testing {

class child {
 public:
  // Starts the demo with `args`; its stderr goes to /dev/null. started() says whether it did.
  explicit child(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    posix_spawn_file_actions_addclose(&actions, fds[1]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(demo.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (::posix_spawn(&pid_, demo.c_str(), &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
  }
  ~child() {
    if (pid_ > 0) kill_now();
    if (out_ != nullptr) std::fclose(out_);
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  [[nodiscard]] bool started() const { return pid_ > 0 && out_ != nullptr; }
  // Reads lines until one starts with `prefix`; false at the end of the output.
  bool wait_for_line(const std::string& prefix) {
    char buf[8192];
    while (std::fgets(buf, sizeof buf, out_) != nullptr) {
      read_ += buf;
      if (std::string(buf).rfind(prefix, 0) == 0) return true;
    }
    return false;
  }
  // Reads the output to its end (the child's exit, or its death after kill_now) and returns all of
  // it, the lines wait_for_line read included, up to the last whole line: a line cut by SIGKILL is
  // left out.
  std::string whole_lines() {
    char buf[8192];
    while (const std::size_t n = std::fread(buf, 1, sizeof buf, out_)) read_.append(buf, n);
    return read_.substr(0, read_.rfind('\n') + 1);
  }
  // SIGKILL (a child that already exited is only reaped). True when the signal ended it, false
  // when it had exited by itself first.
  bool kill_now() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string read_;  // what was read so far
};

// `flags` split at spaces, as argv.
inline std::vector<std::string> split(const std::string& flags) {
  std::vector<std::string> out;
  std::string word;
  for (const char c : flags) {
    if (c == ' ') {
      if (!word.empty()) out.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(word);
  return out;
}

}  // namespace zoe::testing
