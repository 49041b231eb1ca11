"""The exports room: each run's trainer scalars (at their step) and insight metrics sent to TensorBoard and W&B while
the job runs (`server start --export-tensorboard DIR`, `--export-wandb`), each run's last insights once more at stop;
points written and dropped on /metrics (`rl-insight export` does the same offline from the run store)."""

from __future__ import annotations

from typing import Iterable

from fastapi import APIRouter

from ...live.collectors import ExportCollector
from ...state import AppState
from ..house import Room
from .exporters import Exporters, build_exporters


def assemble(st: AppState) -> Exporters:
    exporters = build_exporters(st.config)
    if not exporters.all:
        return exporters
    st.intake.on_samples.append(exporters.samples)
    st.registry.register(ExportCollector(exporters))
    reader, writer, insight, cfg = st.reader, st.writer, st.insight, st.config

    def final_insights() -> None:
        """At stop, after the insight rounds ended and before the exports close: each run's last insights."""
        if reader is not None and writer is not None:
            writer.flush(10)
            exporters.final_insights(reader, cfg.step_metric, cfg.version_metric)

    # closed after the final export, which runs after the insight rounds stopped (added ahead of them: stopped after)
    ahead = "insights" if insight is not None else None
    st.life.add("exports", stop=exporters.close, before=ahead)
    st.life.add("final insight export", stop=final_insights, before=ahead)
    if insight is not None:
        insight.on_refresh.append(exporters.insights)
    return exporters


def routes(st: AppState, exporters: Exporters) -> Iterable[APIRouter]:
    return []


FEATURE: Room[Exporters] = Room("exports", __doc__ or "", assemble, routes, cli=("export",))
