// zoe-bench: the benchmarks users run on their own machines, one subcommand each (io, alloc,
// adam, quant, params, optimizer). Each prints a readable table or line on stdout, progress on stderr, and with --json
// one JSON object per result. Bad flags exit 2 naming the flag.
#include <csignal>
#include <exception>
#include <iostream>

#include "commands.hpp"
#include "zoe/core/error.hpp"

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) must end in an EFBIG error naming the file, not a crash.
  std::signal(SIGXFSZ, SIG_IGN);

  CLI::App app{"zoe-bench: measure what zoe's tiers can move on this machine"};
  app.require_subcommand(1);
  zoe::bench::add_io_command(app);
  zoe::bench::add_alloc_command(app);
  zoe::bench::add_adam_command(app);
  zoe::bench::add_quant_command(app);
  zoe::bench::add_params_command(app);
  zoe::bench::add_optimizer_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the error naming the flag; its own exit codes vary, ours is 2 for bad input.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const zoe::usage_error& e) {
    std::cerr << "zoe-bench: " << e.what() << "\n";
    return 2;
  } catch (const zoe::error& e) {
    std::cerr << "zoe-bench: " << zoe::category_name(e.category()) << " error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "zoe-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
