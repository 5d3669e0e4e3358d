"""Renderings of predictions: the text table, the JSON object, the Chrome trace and the plot.

`clockworks predict` builds a `PredictionReport` and asks for one of these; nothing here simulates.
matplotlib is imported only by the plot, and only when asked for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import ClockworksError
from ..perf.predict import Prediction, bound, link_utilisation
from ..perf.simulate import Timeline
from .plotting import pyplot

CRITICAL_ROWS = 8  # the last steps of the critical path shown in text (JSON has them all)
OP_WIDTH = 60  # widest op text on a critical-path line


@dataclass
class PredictionReport:
    """One `clockworks predict` run: the size sweep, and the world-size sweep at its largest size."""

    schedule: str
    topology: str
    ranks: int
    mode: str
    predictions: list[Prediction]
    scaling: list[tuple[int, Prediction]] = field(default_factory=list)
    topology_file: str = ""  # the file the constants came from (`topology.calibrated.Chosen.file`)
    calibrated: bool = False  # whether `clockworks calibrate` fitted them
    warning: str | None = None  # what to say when they are not calibrated
    symbols: dict[str, int] = field(default_factory=dict)  # the size symbols bound (`--size`)
    priced: str = ""  # how the costs of an imported algorithm's steps are taken, when not as written

    @property
    def last(self) -> Prediction:
        """The prediction at the largest size (its timeline is the one shown)."""
        return self.predictions[-1]


def critical_path(timeline: Timeline) -> list[dict]:
    """The critical path, op by op, with the user's file and line and what each op waited for."""
    return [{"rank": r.rank, "thread": r.thread, "op": r.text, "file": r.loc.file, "line": r.loc.line,
             "start_us": round(r.start, 3), "end_us": round(r.end, 3), "waited_for": r.cause_kind}
            for r in timeline.critical]


def busiest_links(timeline: Timeline) -> list[dict]:
    """The busiest links: bytes moved and utilisation over the run."""
    return [{"link": name, "GB": round(moved, 4), "utilisation": round(util, 4)}
            for name, moved, util in link_utilisation(timeline)]


def explain(prediction: Prediction) -> dict:
    """What bounds one size's time, its critical path and its busiest links."""
    timeline = prediction.timeline
    return {"bound": bound(timeline), "critical_path": critical_path(timeline), "links": busiest_links(timeline)}


def to_json(report: PredictionReport) -> dict:
    """The report as `clockworks predict --json` prints it: every size with its bound, critical
    path and busiest links; at the top level, the same three of the largest size."""
    return {"schedule": report.schedule, "topology": report.topology, "topology_file": report.topology_file,
            "calibrated": report.calibrated, "ranks": report.ranks, "mode": report.mode, "symbols": report.symbols,
            **({"priced_as": report.priced} if report.priced else {}),
            "predictions": [{**p.to_json(), **explain(p)} for p in report.predictions], **explain(report.last),
            "scaling": [{"ranks": n, **p.to_json()} for n, p in report.scaling]}


def render_text(report: PredictionReport) -> str:
    """The report as a table of sizes, the critical path's last steps, the busiest links and the
    scaling sweep."""
    last = report.last
    kind = "calibrated" if report.calibrated else "uncalibrated: not fitted by clockworks calibrate"
    symbols = ", ".join(f"{name}={value}" for name, value in report.symbols.items())
    lines = [f"{report.schedule} on {report.topology}, {report.ranks} ranks, {report.mode} launches: predicted",
             f"topology file: {report.topology_file} ({kind})" + (f"; sizes bound: {symbols}" if symbols else ""), "",
             f"  {'bytes':>12}  {'time (us)':>11}  {'algbw (GB/s)':>12}  {'busbw (GB/s)':>12}"]
    if report.priced:
        lines[2:2] = [f"priced as: {report.priced}"]
    for p in report.predictions:
        lines.append(f"  {p.nbytes:>12}  {p.time_us:>11.2f}  {p.algbw_GBs:>12.2f}  {p.busbw_GBs:>12.2f}")
    lines += ["", f"at {last.nbytes} bytes: {last.time_us:.2f} us; bound by {bound(last.timeline)}",
              "critical path (last ops):"]
    for step in critical_path(last.timeline)[-CRITICAL_ROWS:]:
        who = f"rank {step['rank']}" + (f" thread {step['thread']}" if step["thread"] is not None else "")
        lines.append(f"  {step['file']}:{step['line']}  {who}  {step['op'][:OP_WIDTH]}  "
                     f"{step['start_us']:.2f} -> {step['end_us']:.2f} us  (waited for {step['waited_for']})")
    lines.append("busiest links:")
    for link in busiest_links(last.timeline):
        lines.append(f"  {link['link']}: {link['GB']:.3f} GB moved, busy {link['utilisation']:.0%}")
    if report.scaling:
        lines += ["", f"scaling at {last.nbytes} bytes:"]
        lines += [f"  {n:>4} ranks: {p.time_us:10.2f} us  busbw {p.busbw_GBs:8.2f} GB/s" for n, p in report.scaling]
    return "\n".join(lines)


def chrome_trace(timeline: Timeline) -> dict:
    """The predicted timeline in the Chrome trace-event format (loads in Perfetto)."""
    events = []
    for rec in timeline.records:
        tid = 1 if rec.kind == "delivery" else 0
        events.append({"name": rec.text, "cat": rec.kind, "ph": "X", "ts": round(rec.start, 3),
                       "dur": round(max(rec.end - rec.start, 0.0), 3), "pid": 0, "tid": rec.rank * 2 + tid,
                       "args": {"file": rec.loc.file, "line": rec.loc.line, "waited_for": rec.cause_kind,
                                **rec.detail}})
    ranks = sorted({rec.rank for rec in timeline.records})
    for rank in ranks:
        for tid, label in ((rank * 2, f"rank {rank}"), (rank * 2 + 1, f"rank {rank} deliveries")):
            events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": label}})
    # a rank's threads (`ir.Thread`) each on a row of their own, after the ranks' rows
    threads = sorted({(rec.rank, rec.thread) for rec in timeline.records if rec.thread is not None})
    row = {key: 2 * (max(ranks, default=0) + 1) + i for i, key in enumerate(threads)}
    for event, rec in zip(events, timeline.records):
        if rec.thread is not None and rec.kind != "delivery":
            event["tid"] = row[(rec.rank, rec.thread)]
    for (rank, thread), tid in row.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
                       "args": {"name": f"rank {rank} thread {thread}"}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}




def check_plot_format(path: str) -> None:
    """matplotlib is there and can write the format the file name asks for."""
    pyplot("plotting")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if extension not in formats:
        raise ClockworksError(f"--plot {path}: cannot tell the image format from the name; end it in .png "
                              f"(or one of .{', '.join(sorted(formats))})")


def plot(report: PredictionReport, path: str) -> None:
    """Time and busbw against size, side by side (OSError if `path` cannot be written)."""
    plt = pyplot("plotting")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [p.nbytes for p in report.predictions]
    left.loglog(sizes, [p.time_us for p in report.predictions], marker="o")
    left.set_xlabel("bytes per rank")
    left.set_ylabel("predicted time (us)")
    right.semilogx(sizes, [p.busbw_GBs for p in report.predictions], marker="o")
    right.set_xlabel("bytes per rank")
    right.set_ylabel("busbw (GB/s)")
    fig.suptitle(f"{report.schedule} on {report.topology} (predicted)")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
