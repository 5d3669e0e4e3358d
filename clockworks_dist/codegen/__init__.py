"""Generated CUDA: one readable, self-contained `.cu` per schedule, world size and backend (DESIGN.md,
"Execution: executors, code generation, validation").

- `cuda`: C++ text helpers: identifiers only from validated names, string literals and comments
  that nothing of a user's string can break out of, dtypes, constants;
- `program`: the program every backend shares (MPI bootstrap, one GPU per local rank, the runtime
  layer's inputs, warm-up, timed iterations eager and as a CUDA graph, the check of every element,
  progress words in host-mapped memory, the timeout, one JSON line per rank);
- `nccl`, `nvshmem`: the backends, each a table keyed by op class plus its `UNSUPPORTED` entries
  (`semantics.backends`);
- `build`: finds nvcc, NCCL, NVSHMEM and MPI, and compiles a generated program;
- `validate`: builds, runs under `mpirun`, checks bit for bit, times, predicts, measures NCCL.

The contract of a generated program (what `validate` and the runtime's launcher rely on):

    mpirun -np N ./prog [--job DIR] [--iters K] [--warmup W] [--timeout S] [--no-graph] [--host-progress]

  with NVLink multicast off in every rank, as `runtime.launch` starts them: NCCL_NVLS_ENABLE=0
  NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1, passed on by mpirun's -x.

- Every rank writes its buffers with the runtime layer's inputs (`semantics.numeric.input_values`),
  signal words 0, runs the schedule's ops, and checks every element. Warm-up: W runs (default 2);
  then K timed runs (default 20) in eager mode and K as replays of a CUDA graph of the ops. Inputs
  are written again before every run, outside the timed span; each run is timed on its own with CUDA
  events around the ops; the check follows the first and the last run of each mode.
- With `--job DIR` (the launcher's job directory, `runtime.job`):
  - `DIR/expect<k>.bin` holds rank k's expected values (format below); without it the rank only
    runs (status "ran").
  - `DIR/progress.bin` is the job's progress file (`runtime.progress`): rank k keeps row k
    current (pid, phase, op, member, beat).
  - `DIR/rank<k>.jsonl`: rank k appends its line (below), and prints it on stdout too.
  - `DIR/dump<k>_<i>.bin`: when the check after run i differs from the expected values, rank k
    writes its memory here (every buffer's bytes in declaration order, then its signal words as
    uint64), so the harness can compare with every execution of the checker
    (`runtime.compare.compare_rank`) and name the symbolic expected value.
- `--timeout S` (default 60): a rank whose run has not finished S seconds after it started writes a
  `timeout` line naming its op (for NVSHMEM: each thread block's op) and exits; the host never
  blocks on the GPU without a deadline (it polls CUDA events).
- `--host-progress` (NVSHMEM programs; others ignore it): the kernel writes its progress words to
  host-mapped memory instead of GPU memory copied out by the host (kept to measure what that costs).
- SIGUSR1 / SIGTERM (mpiexec's notice that another rank died): the rank writes a `stopped` line with
  its op and exits.

The line of rank k (the runtime worker's line, `runtime.worker`, plus `graph_seconds`):

    {"rank": k, "item": 0, "schedule": NAME, "world": N, "backend": "nccl"|"nvshmem",
     "status": "match"|"mismatch"|"ran"|"timeout"|"stopped"|"error",
     "seconds": [eager run times, s], "graph_seconds": [graph replay times, s],
     "compare": {"checked", "mismatches", "other_execution", "post_checked", "post_failures",
                 "first": [{"rank", "buffer", "element", "against", "iteration"}], "dumped": bool,
                 "dumps": [the runs whose check differed, each dumped]},
     "op": {"index", "member", "text", "file", "line", "blocks": [op index per block] (nvshmem)},
     "phase", "message"}

Exit code: 0 match or ran, 1 mismatch, 2 error, 3 timeout or stopped.

The expectation file `expect<k>.bin`, little-endian, written by `validate.write_expectations`:

    char[8] "CWEXPECT"; u32 version (1); u32 rank; u32 buffers; u32 signal_words
    per buffer, in the order of `Program.buffers`:
        u64 count; u32 itemsize (on the device: bfloat16 is 2); u32 0
        u64 n; n x (u64 start, u64 stop): the elements checked against the reference execution
        count x itemsize bytes: that execution's values (present when n > 0)
        u64 m; m x (u64 start, u64 stop): the elements a postcondition names
        count x itemsize bytes: the postcondition's values (present when m > 0)
    u64 words; words x u64: the expected signal words; words x u8: 1 where checked
"""
