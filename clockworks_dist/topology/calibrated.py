"""Which topology file a prediction uses: the calibrated one of a shipped machine, when it exists.

A measured machine ships twice: `data/NAME.yaml` describes it (links from nvidia-smi, figures
from datasheets, the simulator's default constants), and `data/measured/NAME.yaml` is the same
machine with the constants `clockworks calibrate` fitted there. The defaults can be off by tens of
percent, so the commands that predict (`predict`, `tune`, `validate`, `topology show`, `cw.predict`)
read a bare shipped name as its calibrated file when one ships, and say which file they used. Any
other spelling loads exactly that file: a path, `NAME.yaml` (the shipped description itself, with
its default constants) or `measured/NAME.yaml` (the shipped calibrated file). `load_topology`
keeps loading exactly what it is given: calibrate's `-t` wants the description, not a fit.

Whatever the file, it counts as calibrated when its provenance says `clockworks calibrate` wrote
it (the `method` calibrate records), wherever it lies: a user's own calibration is calibrated too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .library import ACROSS_BY, CALIBRATED_BY
from .model import DATA_DIR, Topology, _resolve, load_topology

CALIBRATED_DIR = DATA_DIR / "measured"


def is_calibrated(topo: Topology) -> bool:
    """Whether `clockworks calibrate` fitted the constants of `topo` (its provenance says so)."""
    method = topo.provenance.method if topo.provenance else None
    return bool(method) and method.startswith(CALIBRATED_BY) and not method.startswith(ACROSS_BY)


def calibrated_file(name: str) -> Path | None:
    """The calibrated file that ships for the topology `name`, if any."""
    path = CALIBRATED_DIR / f"{name}.yaml"
    return path if _is_file(path) else None


@dataclass(frozen=True)
class Chosen:
    """A topology picked for a prediction: `file` names it as output shows it (a shipped file
    relative to the shipped folder, `measured/h200x2-nv18.yaml`; any other as given)."""

    topology: Topology
    file: str
    calibrated: bool
    asked: str

    def describe(self) -> str:
        """`measured/h200x2-nv18.yaml (calibrated on NVIDIA H200, 2026-11-22)`, or `... (uncalibrated)`."""
        provenance = self.topology.provenance
        if self.calibrated and provenance is not None:
            return f"{self.file} (calibrated on {provenance.gpu or 'an unnamed GPU'}, {provenance.date or 'undated'})"
        return f"{self.file} ({'calibrated' if self.calibrated else 'uncalibrated'})"

    def warning(self) -> str | None:
        """One line for a prediction with uncalibrated constants: which file, and how to do better."""
        if self.calibrated:
            return None
        name = self.topology.name
        if calibrated_file(name) is not None:
            fix = f"a calibrated file ships: give the name {name} (or measured/{name}.yaml)"
        else:
            fix = (f"to calibrate, run clockworks calibrate -t {self.asked} --run DIR --out FILE.yaml on the machine "
                   "and give FILE.yaml")
        of_file = f" of {self.file}" if self.file != self.asked else ""
        return (f"{self.asked}: predicting with the library's constants{of_file} (not fitted on this machine; "
                f"{library_error_text(self.topology)}); {fix}")


def library_error_text(topo: Topology) -> str:
    """What error to expect from the library's constants on `topo`: the leave-one-machine-out figure
    when its GPUs are of a kind the constants were fitted on, else that nobody measured such GPUs."""
    from .library import expected_error, fitted_gpus, same_gpu

    found = expected_error()
    made_on = fitted_gpus()
    models = {d.model for d in topo.devices if d.kind == "gpu" and d.model}
    same_kind = bool(models) and all(any(same_gpu(g, m) for g in made_on) for m in models)
    if not found.get("median_pct"):
        return "they were fitted on no machine: expect errors of tens of percent"
    if not same_kind:
        return (f"fitted on {', '.join(sorted(made_on))} only, never on {', '.join(sorted(models))} GPUs: on an unseen "
                f"machine of the fitted kind NCCL's collectives were off by a median of {found['median_pct']}% (at "
                f"most {found['max_pct']}%); on another GPU generation or fabric expect more")
    return (f"on a machine left out of their fit NCCL's collectives were off by a median of {found['median_pct']}%, "
            f"at most {found['max_pct']}%")


def choose_topology(path_or_name: str | os.PathLike, nodes: int | None = None) -> Chosen:
    """Load the topology a prediction should use for `path_or_name` (the module docstring's rule)."""
    asked = os.fspath(path_or_name)
    found = _locate(asked)
    topo = load_topology(found, nodes=nodes)
    try:
        shown = found.resolve().relative_to(DATA_DIR).as_posix()
    except ValueError:  # not a shipped file: name it as the user did
        shown = asked
    return Chosen(topo, shown, is_calibrated(topo), asked)


def _locate(asked: str) -> Path:
    """The file `asked` means: a file of that path if there is one; else a bare name's calibrated
    file, or `measured/NAME[.yaml]`'s, when it ships; else what `load_topology` finds (or its error,
    which lists the shipped names)."""
    path = Path(asked)
    if not _is_file(path):
        if path.parent == Path(".") and path.suffix not in (".yaml", ".yml"):
            calibrated = calibrated_file(asked)
        elif path.parent == Path(CALIBRATED_DIR.name) and path.suffix in ("", ".yaml", ".yml"):
            calibrated = calibrated_file(path.stem)
        else:
            calibrated = None
        if calibrated is not None:
            return calibrated
    return _resolve(asked)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, or with a NUL byte
        return False
