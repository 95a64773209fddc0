#pragma once
// The file operations a checkpoint save and load use, behind one interface, as leveldb's Env: each
// method states its errors, and a test wraps the real one to fail an operation or to drop every
// write not yet fsynced, as a crash would (tests/engine/fault_checkpoint_fs).
//
// (Interface to be completed with its implementation: files written through the I/O engine,
// fsync of files and folders, rename, read, remove, list.)

namespace zoe::engine {

class checkpoint_fs {
 public:
  virtual ~checkpoint_fs() = default;
  /// The real file system (O_DIRECT writes through the I/O engine where the folder takes them).
  [[nodiscard]] static checkpoint_fs& posix();
};

}  // namespace zoe::engine
