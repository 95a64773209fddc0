#pragma once
// A private folder under the system's temporary directory, removed with everything in it when the
// owner goes (a fuzz run makes many; none may be left behind).

#include <filesystem>

namespace zoe::fuzz {

class scratch_folder {
 public:
  /// Throws std::runtime_error naming the template when the folder cannot be made.
  scratch_folder();
  ~scratch_folder();
  scratch_folder(const scratch_folder&) = delete;
  scratch_folder& operator=(const scratch_folder&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace zoe::fuzz
