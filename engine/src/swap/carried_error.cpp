#include "zoe/engine/swap/carried_error.hpp"

namespace zoe::engine {

carried_error carried_error::of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const io_error& x) {
    return {error_category::io, x.os_errno(), x.what()};
  } catch (const error& x) {
    return {x.category(), 0, x.what()};
  } catch (const std::exception& x) {
    return {error_category::internal, 0, x.what()};
  } catch (...) {
    return {error_category::internal, 0, "an exception that is not a std::exception"};
  }
}

void carried_error::raise() const {
  switch (category) {
    case error_category::io: throw io_error(message, os_errno);
    case error_category::corrupt: throw corruption_error(message);
    case error_category::usage: throw usage_error(message);
    case error_category::config: throw config_error(message);
    case error_category::memory: throw memory_error(message);
    case error_category::device: throw device_error(message);
    case error_category::comm: throw comm_error(message);
    case error_category::timeout: throw timeout_error(message);
    case error_category::internal: break;
  }
  throw internal_error(message);
}

}  // namespace zoe::engine
