// zoe_host_comm's callbacks behind the engine's host_collectives (host_comm.hpp).
#include "host_comm.hpp"

#include <array>
#include <cstddef>
#include <string>

#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::bindings {
namespace {

zoe_dtype c_dtype(kernels::dtype t) noexcept {
  switch (t) {
    case kernels::dtype::fp16: return ZOE_FP16;
    case kernels::dtype::bf16: return ZOE_BF16;
    case kernels::dtype::fp32: break;
  }
  return ZOE_FP32;
}

zoe_reduce_op c_op(engine::reduce_op op) noexcept {
  return op == engine::reduce_op::mean ? ZOE_REDUCE_MEAN : ZOE_REDUCE_SUM;
}

// The category of a status a callback returned: its own where it names one, comm otherwise.
error_category category_of(zoe_status s) noexcept {
  const int v = static_cast<int>(s);
  if (v >= ZOE_ERROR_INTERNAL && v <= ZOE_ERROR_TIMEOUT) return static_cast<error_category>(v);
  return error_category::comm;
}

class c_host_collectives final : public engine::host_collectives {
 public:
  explicit c_host_collectives(const zoe_host_comm& c) : c_(c) {}

  [[nodiscard]] std::size_t rank() const noexcept override { return c_.rank; }
  [[nodiscard]] std::size_t world_size() const noexcept override { return c_.world_size; }
  [[nodiscard]] std::size_t ranks_per_node() const noexcept override { return c_.ranks_per_node; }

  group_handle create_group(std::span<const std::size_t> world_ranks) override {
    const std::vector<std::uint32_t> ranks(world_ranks.begin(), world_ranks.end());
    void* group = nullptr;
    call("create_group",
         [&](char* m, std::size_t n) { return c_.create_group(c_.user, ranks.data(), ranks.size(), &group, m, n); });
    return group;
  }
  void destroy_group(group_handle g) override {
    call("destroy_group", [&](char* m, std::size_t n) { return c_.destroy_group(c_.user, g, m, n); });
  }
  void all_gather(group_handle g, const void* send, void* recv, std::size_t bytes, void* native) override {
    call("all_gather",
         [&](char* m, std::size_t n) { return c_.all_gather(c_.user, g, send, recv, bytes, native, m, n); });
  }
  void reduce_scatter(group_handle g, const void* send, void* recv, std::size_t count, kernels::dtype type,
                      engine::reduce_op op, void* native) override {
    call("reduce_scatter", [&](char* m, std::size_t n) {
      return c_.reduce_scatter(c_.user, g, send, recv, count, c_dtype(type), c_op(op), native, m, n);
    });
  }
  void all_reduce(group_handle g, const void* send, void* recv, std::size_t count, kernels::dtype type,
                  engine::reduce_op op, void* native) override {
    call("all_reduce", [&](char* m, std::size_t n) {
      return c_.all_reduce(c_.user, g, send, recv, count, c_dtype(type), c_op(op), native, m, n);
    });
  }
  void all_to_all(group_handle g, const void* send, void* recv, std::size_t bytes, void* native) override {
    call("all_to_all",
         [&](char* m, std::size_t n) { return c_.all_to_all(c_.user, g, send, recv, bytes, native, m, n); });
  }
  void broadcast(group_handle g, void* buffer, std::size_t bytes, std::size_t root, void* native) override {
    call("broadcast", [&](char* m, std::size_t n) {
      return c_.broadcast(c_.user, g, buffer, bytes, static_cast<std::uint32_t>(root), native, m, n);
    });
  }
  void point_to_point(group_handle g, void* buffer, std::size_t bytes, std::size_t from, std::size_t to,
                      void* native) override {
    call("point_to_point", [&](char* m, std::size_t n) {
      return c_.point_to_point(c_.user, g, buffer, bytes, static_cast<std::uint32_t>(from),
                               static_cast<std::uint32_t>(to), native, m, n);
    });
  }
  void barrier(group_handle g) override {
    call("barrier", [&](char* m, std::size_t n) { return c_.barrier(c_.user, g, m, n); });
  }

 private:
  template <typename Callback>
  static void call(const char* name, Callback&& callback) {
    std::array<char, ZOE_HOST_COMM_MESSAGE_CAPACITY> message{};
    const zoe_status s = callback(message.data(), message.size());
    if (s == ZOE_SUCCESS) return;
    message.back() = '\0';  // a host that filled the buffer to the end
    const std::string text(message.data());
    throw error(category_of(s),
                text.empty() ? str("the host's ", name, " returned ", zoe_status_string(s), " with no message") : text);
  }

  zoe_host_comm c_;
};

}  // namespace

std::shared_ptr<engine::host_collectives> host_collectives_of(const zoe_host_comm* comm) {
  const zoe_host_comm& c = expect_struct(comm, ZOE_FIELDS_END(zoe_host_comm, barrier), "zoe_host_comm");
  const std::array<std::pair<const char*, bool>, 9> callbacks{{{"create_group", c.create_group != nullptr},
                                                               {"destroy_group", c.destroy_group != nullptr},
                                                               {"all_gather", c.all_gather != nullptr},
                                                               {"reduce_scatter", c.reduce_scatter != nullptr},
                                                               {"all_reduce", c.all_reduce != nullptr},
                                                               {"all_to_all", c.all_to_all != nullptr},
                                                               {"broadcast", c.broadcast != nullptr},
                                                               {"point_to_point", c.point_to_point != nullptr},
                                                               {"barrier", c.barrier != nullptr}}};
  for (const auto& [name, given] : callbacks) {
    if (!given) throw usage_error(str("zoe_host_comm.", name, " is NULL (every callback is required)"));
  }
  if (c.world_size == 0 || c.rank >= c.world_size) {
    throw usage_error(str("zoe_host_comm.rank ", c.rank, " is not below zoe_host_comm.world_size ", c.world_size));
  }
  if (c.ranks_per_node != 0 && c.world_size % c.ranks_per_node != 0) {
    throw usage_error(
        str("zoe_host_comm.ranks_per_node ", c.ranks_per_node, " does not divide world_size ", c.world_size));
  }
  return std::make_shared<c_host_collectives>(c);
}

}  // namespace zoe::bindings
