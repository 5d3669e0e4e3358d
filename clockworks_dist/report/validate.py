"""What `clockworks validate` shows: the results table (Markdown), its plot, and the lines printed
per size. Reads the cells `runtime.validate` measured; runs nothing."""

from __future__ import annotations

import shlex

from ..dsl.message import size_text
from .plotting import pyplot


COLUMNS = ("size", "result", "eager us (median, min..max)", "graph us (median, min..max)",
           "predicted eager / graph us", "error eager / graph", "NCCL eager / graph us",
           "speedup vs NCCL eager / graph", "elements checked")


ALIGN = ("---:", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:")


def _time_text(found: dict | None) -> str:
    if not found:
        return "-"
    return f"{found['median_us']:,.1f} ({found['min_us']:,.1f}..{found['max_us']:,.1f})"


def _pair(values: dict | None, first: str, second: str, fmt: str) -> str:
    if not values:
        return "-"
    shown = [fmt.format(values[key]) if values.get(key) is not None else "-" for key in (first, second)]
    return " / ".join(shown)


def table_row(cell: dict) -> list[str]:
    """A cell as the table's columns (`COLUMNS`)."""
    nccl = cell.get("nccl")
    nccl_text = _pair(nccl, "eager_us", "graph_us", "{:,.1f}") if nccl else next(
        (note for note in cell.get("notes", ()) if note.startswith(("no NCCL", "NCCL"))), "-")
    if nccl and nccl.get("correct") is False:
        nccl_text += " (NCCL's own output was wrong)"
    return [cell["size"], cell["verdict"], _time_text(cell.get("eager")), _time_text(cell.get("graph")),
            _pair(cell.get("predicted"), "eager_us", "graph_us", "{:,.1f}"),
            _pair(cell.get("error"), "eager", "graph", "{:+.0%}"), nccl_text,
            _pair(cell.get("speedup_vs_nccl"), "eager", "graph", "{:.2f}x"), f"{cell.get('elements_checked', 0):,}"]


def render_table(cells: list[dict], meta: dict, predicted_by: str, environment: dict[str, str]) -> str:
    """results.md: what was run and how it was timed, then one row per size; problems below."""
    backend, ranks = meta.get("backend", "?"), meta.get("ranks", "?")
    machine = meta.get("machine") or {}
    names = machine.get("gpu_names") or []
    gpus = ", ".join(f"{names.count(name)} x {name}" for name in dict.fromkeys(names)) or "GPUs not named"
    graph_note = (f"{meta.get('iters')} as replays of a CUDA graph of the ops" if meta.get("graph")
                  else "no CUDA graph (--no-graph)")
    if backend == "cupy":
        how = (f"the cupy executor (`clockworks run --backend cupy`), {ranks} ranks, one GPU each; "
               f"{meta.get('warmup')} warm-up runs left out of the times, then {meta.get('iters')} runs issued by "
               "the host (no CUDA graph), each timed with CUDA events around its ops")
    else:
        per_gpu = ("sharing the GPUs (--share-gpus: several PEs on one GPU, so the times are not a machine's "
                   "with a GPU per rank)" if meta.get("shared_gpus") else "one GPU each")
        how = (f"the generated {backend} program, {ranks} ranks, {per_gpu}, under mpirun; "
               f"{meta.get('warmup')} warm-up runs, then {meta.get('iters')} timed runs eagerly and "
               f"{graph_note}; inputs written again before every run, outside the timed span; each run "
               "timed on its own with CUDA events around the ops")
    if (meta.get("calls") or 1) > 1:
        how += (f"; each run is {meta['calls']} back-to-back calls of the schedule (signal words carry an epoch, no "
                f"reset between calls; {meta['between']} between calls; the {meta['calls']}-call schedule is what the "
                "checker verified and what the results are compared with), and every time and prediction below is "
                "per call: the run's time divided by the calls")
        if backend == "nvshmem":
            how += (" (each call its own kernel launch, as a library call's)" if meta.get("kernels") == "per call"
                    else " (the calls run inside the rank's one kernel launch)")
    packets = meta.get("packets")
    if packets:
        counts = ", ".join(str(n) for n in packets.get("channels") or ())
        how += (f"; every put_signal of at most {size_text(packets['max_bytes'])} whose signal word only its wait "
                "reads sent as flag-in-data packets (`--packets`, lowering/packets.py; signal words lowered per size: "
                f"{counts}), the rewritten schedule being what the checker verified and the results are compared with")
    lines = [f"# `clockworks validate` {meta.get('schedule')} ({meta.get('file')}), {backend}", "",
             f"Measured with {how}; the slowest rank per run, median (min..max) over the runs. Size: bytes per "
             "rank of the main buffer, as `clockworks predict` counts them. Result: every element and signal word "
             "compared bit for bit with the checker's values (a value another execution of the checker leaves "
             f"is accepted). Predicted: {predicted_by} on {meta.get('topology') or 'no topology'}, "
             "eager and graph modes; error = (predicted - measured) / measured. NCCL: its own "
             f"{meta.get('nccl_op') or 'collective'} (calibrate/bench_nccl.cu, float32, the same bytes per rank, "
             "per launch over back-to-back launches, eager and captured in one CUDA graph); speedup vs NCCL = "
             "NCCL's time / the measured time (above 1: faster than NCCL).", "",
             f"Machine: {gpus}; NCCL {meta.get('nccl_version') or '-'}. NVLink multicast off: "
             + ", ".join(f"{k}={v}" for k, v in environment.items()) + ".", "",
             "| " + " | ".join(COLUMNS) + " |",
             "| " + " | ".join(ALIGN) + " |"]
    for cell in cells:
        lines.append("| " + " | ".join(text.replace("|", "/") for text in table_row(cell)) + " |")
    problems = [f"- {cell['size']}: {cell['message']}" for cell in cells if cell["verdict"] not in ("match", "ran")]
    notes = sorted({note for cell in cells for note in cell.get("notes", ())
                    if not note.startswith(("no NCCL collective", "NCCL not measured"))})
    if problems:
        lines += ["", "Problems:", ""] + problems
    if notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"




def plot_cells(cells: list[dict], path: str, title: str) -> None:
    """results.png: time against bytes per rank, log-log: measured eager and graph (median, min..max
    as error bars), predicted eager and graph, NCCL eager and graph."""
    plt = pyplot("the plot")
    fig, axes = plt.subplots(figsize=(8, 5))

    def series(get):
        points = [(cell["bytes"], get(cell)) for cell in cells]
        return [p for p in points if p[1] is not None]

    for mode, color in (("eager", "tab:blue"), ("graph", "tab:orange")):
        measured = [(c["bytes"], c[mode]) for c in cells if c.get(mode)]
        if measured:
            xs = [x for x, _ in measured]
            mid = [t["median_us"] for _, t in measured]
            spread = [[t["median_us"] - t["min_us"] for _, t in measured],
                      [t["max_us"] - t["median_us"] for _, t in measured]]
            axes.errorbar(xs, mid, yerr=spread, marker="o", color=color, capsize=3, label=f"measured {mode}")
        for label, get, style in (("predicted", lambda c, m=mode: (c.get("predicted") or {}).get(f"{m}_us"), "--"),
                                  ("NCCL", lambda c, m=mode: (c.get("nccl") or {}).get(f"{m}_us"), ":")):
            points = series(get)
            if points:
                axes.plot([x for x, _ in points], [y for _, y in points], style, marker=".", color=color,
                          label=f"{label} {mode}")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("bytes per rank")
    axes.set_ylabel("time per run (us)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def summary_lines(report: dict) -> list[str]:
    """What `clockworks validate` prints: one line per size (verdict, times, prediction, NCCL), then
    the files written; for a Slurm folder, how to submit it."""
    if report.get("verdict") == "written":
        return [f"wrote {report['sbatch']} and the job directories of {len(report['cells'])} size(s) under "
                f"{report['out']}", f"submit it: sbatch {shlex.quote(report['sbatch'])} (results.md, results.json "
                "and results.png land in the same folder)"]
    lines = [f"{report.get('schedule')}, {report.get('ranks')} ranks, {report.get('backend')}: {report['verdict']}"]
    if report.get("shared_gpus"):
        lines.append("  the ranks shared the GPUs (--share-gpus): the results are checked; the times are not a "
                     "machine's with a GPU per rank")
    for cell in report["cells"]:
        row = dict(zip(COLUMNS, table_row(cell)))
        lines.append(f"  {cell['size']}: {cell['message']}")
        lines.append(f"    eager {row[COLUMNS[2]]} us, graph {row[COLUMNS[3]]} us; predicted {row[COLUMNS[4]]}; "
                     f"NCCL {row[COLUMNS[6]]}; speedup vs NCCL {row[COLUMNS[7]]}")
    if report.get("prediction_note"):
        lines.append(f"  {report['prediction_note']}")
    lines.append(f"wrote {', '.join(report.get('files', ()))}")
    if report.get("plot_note"):
        lines.append(report["plot_note"])
    return lines
