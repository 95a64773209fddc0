#include "zoe/allocators/pinned_host_resource.hpp"

#include <hwloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <utility>

#include "zoe/core/byte_accounting.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/checked.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {

constexpr std::size_t huge_page = 2 * MiB;

namespace detail {

// The hwloc topology, loaded once per resource. hwloc calls on one topology are thread-safe for
// the read-only queries and binding calls we make.
class numa_topology {
 public:
  explicit numa_topology(bool with_io) {
    ZOE_CHECK(hwloc_topology_init(&topology_) == 0, device_error, "hwloc: cannot initialize a topology");
    if (with_io) (void)hwloc_topology_set_io_types_filter(topology_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topology_) != 0) {
      hwloc_topology_destroy(topology_);
      throw device_error(str("hwloc: cannot load the machine topology: ", errno_text(errno)));
    }
    nodes_ = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_NUMANODE);
  }
  ~numa_topology() { hwloc_topology_destroy(topology_); }
  numa_topology(const numa_topology&) = delete;
  numa_topology& operator=(const numa_topology&) = delete;

  [[nodiscard]] int nodes() const noexcept { return nodes_ < 1 ? 1 : nodes_; }

  // The node of the CPU this thread last ran on; -1 when hwloc cannot tell.
  [[nodiscard]] int node_of_calling_thread() const {
    const bitmap cpus;
    if (hwloc_get_last_cpu_location(topology_, cpus.get(), HWLOC_CPUBIND_THREAD) != 0) return -1;
    const bitmap nodes;
    hwloc_cpuset_to_nodeset(topology_, cpus.get(), nodes.get());
    return hwloc_bitmap_first(nodes.get());
  }

  // The node closest to a PCI device; -1 when it is unknown to hwloc.
  [[nodiscard]] int node_of_pci(const std::string& bus_id) const {
    hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topology_, bus_id.c_str());
    if (pci == nullptr) return -1;
    hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(topology_, pci);
    if (parent == nullptr || parent->nodeset == nullptr) return -1;
    return hwloc_bitmap_first(parent->nodeset);
  }

  // Binds not-yet-touched pages to `node`. Returns false (after one warning) where refused.
  bool bind(void* p, std::size_t bytes, int node) const {
    const bitmap set;
    hwloc_bitmap_only(set.get(), static_cast<unsigned>(node));
    if (hwloc_set_area_membind(topology_, p, bytes, set.get(), HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET) == 0) {
      return true;
    }
    log::warn_once("allocators.pinned.membind", str("cannot bind pinned host memory to NUMA node ", node, ": ",
                                                    errno_text(errno), "; the first touch places it instead"));
    return false;
  }

  // The node the (faulted-in) pages at p sit on; -1 when the kernel does not say.
  [[nodiscard]] int node_of_memory(const void* p, std::size_t bytes) const {
    const bitmap set;
    if (hwloc_get_area_memlocation(topology_, p, bytes, set.get(), HWLOC_MEMBIND_BYNODESET) != 0) return -1;
    return hwloc_bitmap_first(set.get());
  }

 private:
  class bitmap {
   public:
    bitmap() : map_(hwloc_bitmap_alloc()) { ZOE_CHECK(map_ != nullptr, memory_error, "hwloc: out of memory"); }
    ~bitmap() { hwloc_bitmap_free(map_); }
    bitmap(const bitmap&) = delete;
    bitmap& operator=(const bitmap&) = delete;
    [[nodiscard]] hwloc_bitmap_t get() const noexcept { return map_; }

   private:
    hwloc_bitmap_t map_;
  };

  hwloc_topology_t topology_ = nullptr;
  int nodes_ = 1;
};

}  // namespace detail

namespace {

// "always" or "madvise" mean an madvise(MADV_HUGEPAGE) mapping gets huge pages.
bool thp_available() {
  static const bool available = [] {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string text;
    std::getline(in, text);
    return text.find("[always]") != std::string::npos || text.find("[madvise]") != std::string::npos;
  }();
  return available;
}

std::size_t page_size() {
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

// Shared between the resource and its buffers so accounting survives whichever dies last.
struct pinned_buffer::owner {
  device* dev = nullptr;
  std::atomic<std::uint64_t> in_use{0};
  std::atomic<std::uint64_t> peak{0};
};

pinned_buffer::~pinned_buffer() { reset(); }

pinned_buffer::pinned_buffer(pinned_buffer&& o) noexcept
    : owner_(std::move(o.owner_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      locked_(std::exchange(o.locked_, false)),
      numa_node_(std::exchange(o.numa_node_, -1)),
      huge_pages_(std::exchange(o.huge_pages_, false)) {}

pinned_buffer& pinned_buffer::operator=(pinned_buffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::move(o.owner_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    locked_ = std::exchange(o.locked_, false);
    numa_node_ = std::exchange(o.numa_node_, -1);
    huge_pages_ = std::exchange(o.huge_pages_, false);
  }
  return *this;
}

void pinned_buffer::reset() noexcept {
  if (owner_ != nullptr) {
    if (data_ != nullptr) {
      const std::size_t mapped = align_up(size_, page_size());
      if (locked_) owner_->dev->unregister_host(data_, mapped);
      ::munmap(data_, mapped);
    }
    owner_->in_use -= size_;
  }
  owner_.reset();
  data_ = nullptr;
  size_ = 0;
}

pinned_host_resource::pinned_host_resource(device& dev, pinned_options options)
    : device_(&dev),
      options_(options),
      // I/O objects are only needed to find a device's PCI bus, and cost time to discover.
      topology_(std::make_unique<detail::numa_topology>(options.placement == numa_placement::device &&
                                                        dev.pci_bus_id().has_value())),
      owner_(std::make_shared<pinned_buffer::owner>()) {
  owner_->dev = &dev;
  // Searched once: the device does not move, and the search walks hwloc's I/O objects.
  if (options_.placement == numa_placement::device) {
    if (const auto bus = dev.pci_bus_id()) device_node_ = topology_->node_of_pci(*bus);
  }
  if (options_.placement == numa_placement::explicit_node) {
    ZOE_EXPECTS(options_.numa_node >= 0 && options_.numa_node < topology_->nodes(), "pinned memory: NUMA node ",
                options_.numa_node, " does not exist (this machine has ", topology_->nodes(), ")");
  }
}

pinned_host_resource::~pinned_host_resource() {
  if (const auto left = owner_->in_use.load(); left != 0) {
    log::warn("pinned host resource destroyed with ", format_bytes(left), " still handed out");
  }
}

int pinned_host_resource::numa_nodes() const noexcept { return topology_->nodes(); }

std::uint64_t pinned_host_resource::bytes_in_use() const noexcept { return owner_->in_use.load(); }

std::uint64_t pinned_host_resource::peak_bytes_in_use() const noexcept { return owner_->peak.load(); }

int pinned_host_resource::target_node() const {
  switch (options_.placement) {
    case numa_placement::none: return -1;
    case numa_placement::explicit_node: return options_.numa_node;
    case numa_placement::device: return device_node_ >= 0 ? device_node_ : topology_->node_of_calling_thread();
    case numa_placement::calling_thread: return topology_->node_of_calling_thread();
  }
  return -1;
}

pinned_buffer pinned_host_resource::allocate(std::size_t bytes) {
  pinned_buffer out;
  if (bytes == 0) return out;
  // Checked before anything is counted: a size within a page of 2^64 would wrap to a tiny mapping
  // (and raise the peak to a size never held).
  const std::optional<std::uint64_t> pages = align_up_checked(bytes, page_size());
  if (!pages) {
    throw memory_error(str("pinned host memory: cannot allocate ", format_bytes(bytes), " (", bytes,
                           " bytes): no mapping that large can exist"));
  }
  const std::size_t length = *pages;
  const std::uint64_t limit =
      options_.limit_bytes != 0 ? options_.limit_bytes : std::numeric_limits<std::uint64_t>::max() - bytes;
  std::uint64_t now = 0;
  if (!::zoe::detail::try_reserve(owner_->in_use, bytes, limit, now)) {
    throw memory_error(str("pinned host memory exhausted: cannot allocate ", format_bytes(bytes), " with ",
                           format_bytes(now), " of its ", format_bytes(options_.limit_bytes), " limit in use"));
  }
  // Raised at the reservation, before the mapping: a mapping that then fails was counted briefly,
  // so the peak may report more than was held, never less.
  ::zoe::detail::raise_peak(owner_->peak, now + bytes);
  out.owner_ = owner_;
  out.size_ = bytes;  // from here on, out.reset() undoes the accounting (and, once data_ is set, the mapping)

  // Huge pages need 2 MiB-aligned virtual addresses: over-map and trim to an aligned window.
  const bool want_huge = options_.huge_pages && length >= huge_page && thp_available();
  const std::size_t reserve = want_huge ? length + huge_page : length;
  void* raw = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    const int err = errno;
    throw memory_error(str("pinned host memory: cannot map ", format_bytes(length), ": ", errno_text(err)));
  }
  auto* base = static_cast<std::byte*>(raw);
  if (want_huge) {
    auto* aligned = reinterpret_cast<std::byte*>(align_up(reinterpret_cast<std::uintptr_t>(base), huge_page));
    const auto head = static_cast<std::size_t>(aligned - base);
    if (head > 0) ::munmap(base, head);
    const std::size_t tail = reserve - head - length;
    if (tail > 0) ::munmap(aligned + length, tail);
    base = aligned;
    out.huge_pages_ = ::madvise(base, length, MADV_HUGEPAGE) == 0;
  }
  out.data_ = base;

  // Placement must precede the first touch: locking faults the pages in where the policy says.
  const int node = target_node();
  if (node >= 0 && topology_->nodes() > 1) (void)topology_->bind(base, length, node);
  out.locked_ = device_->register_host(base, length);
  if (!out.locked_) {
    // Unlocked memory is still faulted in now, so no page fault lands in a transfer later.
    for (std::size_t off = 0; off < length; off += page_size()) base[off] = std::byte{0};
  }
  const int actual = topology_->node_of_memory(base, length);
  out.numa_node_ = actual >= 0 ? actual : node;
  log::debug("pinned host memory: ", format_bytes(length), " on NUMA node ", out.numa_node_,
             out.locked_ ? ", locked" : ", NOT locked", out.huge_pages_ ? ", huge pages" : "");
  return out;
}

}  // namespace zoe::allocators
