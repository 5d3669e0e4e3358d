"""Reports: human-readable renderings of schedules and check results (tables, timelines)."""

from .text import (
    overall_verdict, render_listing, render_opref, render_result, render_summary, render_timeline,
    render_verdict, render_violation,
)

__all__ = [
    "overall_verdict", "render_listing", "render_opref", "render_result", "render_summary",
    "render_timeline", "render_verdict", "render_violation",
]
