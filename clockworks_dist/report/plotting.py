"""matplotlib for the reports that draw (prediction plots, validate's results.png), loaded only then."""

from __future__ import annotations

from ..errors import MissingDependency


def pyplot(what: str):
    """matplotlib.pyplot on the Agg backend; `MissingDependency` naming `what` needs it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependency(f"{what} needs matplotlib: pip install 'clockworks-dist[plot]'") from exc
    return plt
