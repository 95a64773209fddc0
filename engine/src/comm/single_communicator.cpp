// The world-size-1 communicator: every collective is the identity, so each is at most one
// stream-ordered device-to-device copy and sends nothing.
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "collective.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine {
namespace {

class single_communicator final : public communicator {
 public:
  explicit single_communicator(device& dev) : dev_(&dev) {}

  [[nodiscard]] std::size_t rank() const noexcept override { return 0; }
  [[nodiscard]] std::size_t size() const noexcept override { return 1; }
  [[nodiscard]] std::string name() const override { return std::string(group_name); }

  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    identity({collective::all_gather, group_name}, send, recv, bytes, stream);
  }

  void all_gather_coalesced(std::span<const gather_part> parts, stream_view stream) override {
    const detail::collective_call call{collective::all_gather, group_name};
    refuse_if_aborted(call);
    for (const gather_part& part : parts) check(call, part.send, part.recv, part.bytes);
    for (const gather_part& part : parts) copy(part.send, part.recv, part.bytes, stream);
    traffic_.count(call.what, {});
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                      stream_view stream) override {
    reduction(collective::reduce_scatter, send, recv, count, type, op, stream);
  }

  void reduce_scatter_coalesced(std::span<const reduce_part> parts, reduce_op op, stream_view stream) override {
    const detail::collective_call call{collective::reduce_scatter, group_name};
    refuse_if_aborted(call);
    for (const reduce_part& part : parts) {
      check(call, part.send, part.recv, detail::element_bytes(call, part.count, part.type, op));
    }
    for (const reduce_part& part : parts)
      copy(part.send, part.recv, kernels::dtype_size(part.type) * part.count, stream);
    traffic_.count(call.what, {});
  }

  void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    identity({collective::all_to_all, group_name}, send, recv, bytes, stream);
  }

  void all_reduce(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                  stream_view stream) override {
    reduction(collective::all_reduce, send, recv, count, type, op, stream);
  }

  void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view /*stream*/) override {
    const detail::collective_call call{collective::broadcast, group_name};
    refuse_if_aborted(call);
    ZOE_EXPECTS(root < size(), detail::describe(call), ": root ", root, " is not a rank of the group (size ", size(),
                ")");
    detail::check_buffer(call, "broadcast", buffer, bytes);
    traffic_.count(call.what, {});
  }

  // From rank 0 to rank 0: nothing moves.
  void point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to,
                      stream_view /*stream*/) override {
    const detail::collective_call call{collective::point_to_point, group_name};
    refuse_if_aborted(call);
    ZOE_EXPECTS(from < size() && to < size(), detail::describe(call), ": from ", from, " or to ", to,
                " is not a rank of the group (size ", size(), ")");
    detail::check_buffer(call, "buffer", buffer, bytes);
    traffic_.count(call.what, {});
  }

  void barrier() override {
    if (!aborted_.empty()) throw comm_error(str("barrier on ", group_name, ": not run: ", aborted_));
  }

  [[nodiscard]] communicator& node_local() override { return *this; }
  [[nodiscard]] communicator& cross_node() override { return *this; }
  [[nodiscard]] communicator& hpz() override { return *this; }

  [[nodiscard]] comm_stats stats() const override { return traffic_.snapshot(); }

  // No peer to tell: only this rank's later calls are refused.
  void abort(std::string_view reason) noexcept override {
    if (!aborted_.empty()) return;
    try {
      aborted_ = str(group_name, ": aborted: ", reason);
    } catch (...) {
      aborted_ = "aborted";
    }
  }

 private:
  void refuse_if_aborted(detail::collective_call call) const {
    if (!aborted_.empty()) throw comm_error(str(detail::describe(call), ": not run: ", aborted_));
  }

  // A reduction over one rank is its input: the identity, after checking the element type and op.
  void reduction(collective what, const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                 stream_view stream) {
    const detail::collective_call call{what, group_name};
    identity(call, send, recv, detail::element_bytes(call, count, type, op), stream);
  }

  // Checks the call, copies send to recv on the stream unless they are the same block, and counts.
  // With one rank every in-place form (send at recv + rank() * block) is send == recv.
  void identity(detail::collective_call call, const void* send, void* recv, std::uint64_t bytes, stream_view stream) {
    refuse_if_aborted(call);
    check(call, send, recv, bytes);
    copy(send, recv, bytes, stream);
    traffic_.count(call.what, {});  // nothing leaves a lone rank
  }

  static void check(detail::collective_call call, const void* send, const void* recv, std::uint64_t bytes) {
    detail::check_buffer(call, "send", send, bytes);
    detail::check_buffer(call, "recv", recv, bytes);
    detail::check_overlap(call, send, bytes, recv, bytes, recv);
  }

  void copy(const void* send, void* recv, std::uint64_t bytes, stream_view stream) {
    if (send != recv && bytes > 0) dev_->copy_async(recv, send, bytes, copy_kind::device_to_device, stream);
  }

  static constexpr std::string_view group_name = "single (world)";
  device* dev_;
  detail::traffic_counter traffic_;
  std::string aborted_;  // why abort() was called; empty while usable
};

}  // namespace

std::unique_ptr<communicator> make_single_communicator(device& dev) {
  return std::make_unique<single_communicator>(dev);
}

}  // namespace zoe::engine
