#include "fault_checkpoint_fs.hpp"

#include <cerrno>
#include <fstream>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {

struct fault_checkpoint_fs::node {
  bool folder = false;
  std::string bytes;                                           ///< a file's bytes as visible now
  std::string durable_bytes;                                   ///< what a crash leaves of them
  std::map<std::string, std::shared_ptr<node>> names;          ///< a folder's names as visible now
  std::map<std::string, std::shared_ptr<node>> durable_names;  ///< what a crash leaves of them
};

namespace {

using node_ptr = std::shared_ptr<fault_checkpoint_fs::node>;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

node_ptr snapshot(const std::filesystem::path& path) {
  auto n = std::make_shared<fault_checkpoint_fs::node>();
  if (std::filesystem::is_directory(path)) {
    n->folder = true;
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      n->names[entry.path().filename().string()] = snapshot(entry.path());
    }
    n->durable_names = n->names;
  } else {
    n->bytes = n->durable_bytes = read_file(path);
  }
  return n;
}

/// Writes the durable state of folder `n` into the (empty) folder `path`, and makes it the visible one.
void rebuild(fault_checkpoint_fs::node& n, const std::filesystem::path& path) {
  n.names = n.durable_names;
  for (const auto& [name, child] : n.names) {
    if (child->folder) {
      std::filesystem::create_directory(path / name);
      rebuild(*child, path / name);
    } else {
      child->bytes = child->durable_bytes;
      std::ofstream out(path / name, std::ios::binary | std::ios::trunc);
      out.write(child->bytes.data(), static_cast<std::streamsize>(child->bytes.size()));
    }
  }
}

class fault_writer final : public engine::checkpoint_writer {
 public:
  fault_writer(fault_checkpoint_fs& fs, std::filesystem::path path, node_ptr file,
               std::unique_ptr<engine::checkpoint_writer> inner)
      : fs_(fs), path_(std::move(path)), file_(std::move(file)), inner_(std::move(inner)) {}
  void append(std::span<const std::byte> data) override {
    fs_.step("append to", path_);
    inner_->append(data);
    fs_.appended(*file_, data);
  }
  void sync() override {
    fs_.step("sync", path_);
    inner_->sync();
    fs_.synced(*file_);
  }
  [[nodiscard]] std::uint64_t size() const noexcept override { return inner_->size(); }

 private:
  fault_checkpoint_fs& fs_;
  std::filesystem::path path_;
  node_ptr file_;
  std::unique_ptr<engine::checkpoint_writer> inner_;
};

class fault_reader final : public engine::checkpoint_reader {
 public:
  fault_reader(fault_checkpoint_fs& fs, std::filesystem::path path, std::unique_ptr<engine::checkpoint_reader> inner)
      : fs_(fs), path_(std::move(path)), inner_(std::move(inner)) {}
  [[nodiscard]] std::uint64_t size() const noexcept override { return inner_->size(); }
  void read(std::uint64_t offset, std::span<std::byte> out) override {
    fs_.step("read", path_);
    inner_->read(offset, out);
  }

 private:
  fault_checkpoint_fs& fs_;
  std::filesystem::path path_;
  std::unique_ptr<engine::checkpoint_reader> inner_;
};

}  // namespace

fault_checkpoint_fs::fault_checkpoint_fs(engine::checkpoint_fs& base, std::filesystem::path root)
    : base_(base), root_(std::move(root)), model_(snapshot(root_)) {
  ZOE_EXPECTS(model_->folder, "fault_checkpoint_fs: '", root_.string(), "' is not a folder");
}

fault_checkpoint_fs::~fault_checkpoint_fs() = default;

std::uint64_t fault_checkpoint_fs::operations() const {
  const std::lock_guard lock(mutex_);
  return operations_;
}

void fault_checkpoint_fs::crash_at(std::uint64_t n) {
  const std::lock_guard lock(mutex_);
  crash_at_ = n;
}

void fault_checkpoint_fs::fail_at(std::uint64_t n) {
  const std::lock_guard lock(mutex_);
  fail_at_ = n;
}

bool fault_checkpoint_fs::crashed() const {
  const std::lock_guard lock(mutex_);
  return crashed_;
}

void fault_checkpoint_fs::step(std::string_view what, const std::filesystem::path& path) {
  const std::lock_guard lock(mutex_);
  const std::uint64_t n = operations_++;
  if (crashed_ || (crash_at_ && n >= *crash_at_)) {
    crashed_ = true;
    throw simulated_crash(str("simulated crash at operation ", n, ": ", what, " '", path.string(), "'"));
  }
  if (fail_at_ && n == *fail_at_) {
    throw io_error(str("injected failure of operation ", n, ": ", what, " '", path.string(), "'"), EIO);
  }
}

void fault_checkpoint_fs::appended(node& file, std::span<const std::byte> data) {
  const std::lock_guard lock(mutex_);
  file.bytes.append(reinterpret_cast<const char*>(data.data()), data.size());  // NOLINT
}

void fault_checkpoint_fs::synced(node& file) {
  const std::lock_guard lock(mutex_);
  file.durable_bytes = file.bytes;
}

void fault_checkpoint_fs::drop_unsynced() {
  const std::lock_guard lock(mutex_);
  for (const auto& entry : std::filesystem::directory_iterator(root_)) std::filesystem::remove_all(entry.path());
  rebuild(*model_, root_);
  operations_ = 0;
  crash_at_.reset();
  fail_at_.reset();
  crashed_ = false;
}

std::shared_ptr<fault_checkpoint_fs::node> fault_checkpoint_fs::find(const std::filesystem::path& path) const {
  const std::filesystem::path rel = path.lexically_normal().lexically_relative(root_.lexically_normal());
  ZOE_EXPECTS(!rel.empty() && *rel.begin() != "..", "fault_checkpoint_fs: '", path.string(), "' is outside '",
              root_.string(), "'");
  node_ptr at = model_;
  for (const auto& part : rel) {
    if (part == ".") continue;
    if (!at->folder) return nullptr;
    const auto it = at->names.find(part.string());
    if (it == at->names.end()) return nullptr;
    at = it->second;
  }
  return at;
}

std::pair<std::shared_ptr<fault_checkpoint_fs::node>, std::string> fault_checkpoint_fs::parent_of(
    const std::filesystem::path& path) const {
  const std::filesystem::path p = path.lexically_normal();
  node_ptr parent = find(p.parent_path());
  ZOE_EXPECTS(parent && parent->folder, "fault_checkpoint_fs: no folder holds '", path.string(), "' in the model");
  return {parent, p.filename().string()};
}

std::unique_ptr<engine::checkpoint_writer> fault_checkpoint_fs::create(const std::filesystem::path& path) {
  step("create", path);
  auto inner = base_.create(path);
  const std::lock_guard lock(mutex_);
  auto [parent, name] = parent_of(path);
  node_ptr& file = parent->names[name];
  if (file) {
    // Truncated in place; the model takes the truncation as durable at once (the worse case).
    file->bytes.clear();
    file->durable_bytes.clear();
  } else {
    file = std::make_shared<node>();
  }
  return std::make_unique<fault_writer>(*this, path, file, std::move(inner));
}

std::unique_ptr<engine::checkpoint_reader> fault_checkpoint_fs::open(const std::filesystem::path& path) {
  step("open", path);
  return std::make_unique<fault_reader>(*this, path, base_.open(path));
}

bool fault_checkpoint_fs::exists(const std::filesystem::path& path) {
  step("look for", path);
  return base_.exists(path);
}

bool fault_checkpoint_fs::is_link(const std::filesystem::path& path) {
  step("look at", path);
  return base_.is_link(path);
}

void fault_checkpoint_fs::create_directory(const std::filesystem::path& path) {
  step("create folder", path);
  base_.create_directory(path);
  const std::lock_guard lock(mutex_);
  auto [parent, name] = parent_of(path);
  node_ptr& folder = parent->names[name];
  if (!folder) {
    folder = std::make_shared<node>();
    folder->folder = true;
  }
}

void fault_checkpoint_fs::sync_directory(const std::filesystem::path& path) {
  step("sync folder", path);
  base_.sync_directory(path);
  const std::lock_guard lock(mutex_);
  const node_ptr folder = find(path);
  ZOE_EXPECTS(folder && folder->folder, "fault_checkpoint_fs: no folder '", path.string(), "' in the model");
  folder->durable_names = folder->names;
}

void fault_checkpoint_fs::rename(const std::filesystem::path& from, const std::filesystem::path& to) {
  step("rename", from);
  base_.rename(from, to);
  const std::lock_guard lock(mutex_);
  auto [from_parent, from_name] = parent_of(from);
  auto [to_parent, to_name] = parent_of(to);
  node_ptr moved = from_parent->names.at(from_name);
  from_parent->names.erase(from_name);
  to_parent->names[to_name] = std::move(moved);
}

void fault_checkpoint_fs::exchange(const std::filesystem::path& a, const std::filesystem::path& b) {
  step("exchange", a);
  base_.exchange(a, b);
  const std::lock_guard lock(mutex_);
  auto [a_parent, a_name] = parent_of(a);
  auto [b_parent, b_name] = parent_of(b);
  std::swap(a_parent->names.at(a_name), b_parent->names.at(b_name));
}

void fault_checkpoint_fs::remove(const std::filesystem::path& path) {
  step("remove", path);
  base_.remove(path);
  const std::lock_guard lock(mutex_);
  auto [parent, name] = parent_of(path);
  parent->names.erase(name);
}

std::vector<std::string> fault_checkpoint_fs::list(const std::filesystem::path& path) {
  step("list", path);
  return base_.list(path);
}

}  // namespace zoe::testing
