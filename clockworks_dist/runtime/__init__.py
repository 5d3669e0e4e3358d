"""Running a schedule for real, and checking every element against the checker (DESIGN.md,
"Execution").

- `numeric`: deterministic inputs whose reductions are exact in every dtype, and the arithmetic
  (rounding, atomics, opaque kernels) the expected values and every executor share;
- `expected`: the checker's final values (one execution, and every value any execution leaves
  where they differ), symbolic and picklable, evaluated to numbers rank by rank;
- `compare`: a rank's memory against them, bit for bit; the first mismatches with the expected
  value as a term and as a number;
- `mpi_cpu`: the `mpi-cpu` executor (numpy + mpi4py), a backend table keyed by op class;
- `job`, `worker`, `launch`, `progress`: a job of schedules run under `mpiexec` (one process per
  rank, one JSON line per rank and schedule), its progress words, and the launcher that watches
  it, stops hangs and crashes and leaves no process behind;
- `verdict`: the lines of a job summed up: results match, mismatch, hang or crash, with each
  rank's op and file:line.

numpy is needed here; mpi4py only where a rank runs (`mpi_cpu`, `worker`).
"""
