#include "scratch_folder.hpp"

#include <stdlib.h>  // mkdtemp

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

namespace zoe::fuzz {

scratch_folder::scratch_folder() {
  std::string name = (std::filesystem::temp_directory_path() / "zoe-fuzz-XXXXXX").string();
  if (mkdtemp(name.data()) == nullptr) {
    throw std::runtime_error("cannot make a folder from '" + name + "': " + std::strerror(errno));
  }
  path_ = name;
}

scratch_folder::~scratch_folder() {
  std::error_code ignored;  // a destructor never throws; a folder left over is all it can cost
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace zoe::fuzz
