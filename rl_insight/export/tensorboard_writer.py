"""TensorBoard event files with the `tensorboard` package's own writer (no torch needed)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

from ..errors import ConfigError
from . import Point


def _import() -> tuple:
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise ConfigError("TensorBoard export needs the tensorboard package, which is not installed",
                          hint='pip install "rl-insight[tensorboard]"') from None
    return EventFileWriter, event_pb2, summary_pb2


class TensorBoardRun:
    """One run's log dir: scalars at their step, text (the run's config) once."""

    def __init__(self, log_dir: Path) -> None:
        EventFileWriter, self._event, self._summary = _import()
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self._w = EventFileWriter(str(log_dir), max_queue_size=1000, flush_secs=5, filename_suffix=".rl-insight")

    def scalars(self, points: Iterable[Point]) -> int:
        """One event per step (all of that step's values in one summary): far fewer protobuf records than
        one event per value, and TensorBoard reads them the same."""
        by_step: dict[int, tuple[float, list]] = {}
        Value = self._summary.Summary.Value
        n = 0
        for p in points:
            wall, values = by_step.setdefault(int(p.step), (p.wall_time, []))
            values.append(Value(tag=p.tag, simple_value=float(p.value)))
            n += 1
        for step, (wall, values) in by_step.items():
            self._w.add_event(self._event.Event(wall_time=wall, step=step, summary=self._summary.Summary(value=values)))
        return n

    def text(self, tag: str, text: str, step: int = 0) -> None:
        """A text summary (TensorBoard's Text tab), as the `text` plugin reads it."""
        from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode("utf-8", "replace")],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[]))
        meta = self._summary.SummaryMetadata(plugin_data=self._summary.SummaryMetadata.PluginData(plugin_name="text"))
        value = self._summary.Summary.Value(tag=tag, metadata=meta, tensor=tensor)
        self._w.add_event(
            self._event.Event(wall_time=time.time(), step=step, summary=self._summary.Summary(value=[value]))
        )

    def flush(self) -> None:
        self._w.flush()

    def close(self) -> None:
        self._w.close()
