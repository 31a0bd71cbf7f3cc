// Which op runs where: the kernel tables of the backends compiled into this
// build, and the ops a backend leaves out on purpose, with the reason. The
// coverage report (`python -m kaiwu_infer ops`, docs/ops.md) is made from this.
#pragma once

#include <string>
#include <vector>

#include "backends/kernel.h"

namespace kaiwu {

struct KernelTable {
  std::string backend;  ///< "cpu", "cuda"
  const KernelRegistry* kernels;
  /// Ops this backend has no kernel for by design, and why.
  std::vector<std::pair<OpId, std::string>> gaps;
};

/// The CPU table, then the CUDA table in builds with the CUDA backend (whether
/// or not a device is present).
std::vector<KernelTable> KernelTables();

}  // namespace kaiwu
