// The op list and the backends' kernel tables, for the coverage report
// (kaiwu_infer.ops, `python -m kaiwu_infer ops`).
#include <pybind11/stl.h>

#include "backends/coverage.h"
#include "backends/cpu/quant_gemm.h"
#include "bindings.h"

namespace kaiwu {
namespace python {

void BindOps(py::module_& m) {
  m.def(
      "op_table",
      [] {
        const std::vector<KernelTable> tables = KernelTables();
        py::list rows;
        for (int i = 0; i < kNumOps; ++i) {
          const OpId op = static_cast<OpId>(i);
          py::dict row;
          row["op"] = OpName(op);
          row["domain"] = OpDomain(op);
          row["plan_time"] = GetOpDef(op).eval != nullptr;
          row["infer"] = GetOpDef(op).infer != nullptr;
          py::dict kernels, gaps;
          for (const KernelTable& t : tables) {
            py::list entries;
            for (const KernelRegistry::Entry& e : t.kernels->entries())
              if (e.op == op)
                entries.append(py::make_tuple(DTypeName(e.dtype),
                                              PrecisionName(e.precision)));
            kernels[py::str(t.backend)] = entries;
            for (const auto& [gap_op, reason] : t.gaps)
              if (gap_op == op) gaps[py::str(t.backend)] = reason;
          }
          row["kernels"] = kernels;
          row["gaps"] = gaps;
          rows.append(row);
        }
        return rows;
      },
      "Every op the engine knows, with each compiled-in backend's kernel table entries "
      "(dtype, precision) and the reasons for ops a backend leaves out.");
  m.def(
      "int8_isa", [] { return std::string(cpu::QIsaName(cpu::QGemmIsa())); },
      "The instruction set of the CPU int8 kernels in this process: 'amx', 'avx512vnni', 'avx2' or "
      "'scalar' (the best the CPU has, capped by the environment variable KAIWU_INT8_ISA).");
}

}  // namespace python
}  // namespace kaiwu
