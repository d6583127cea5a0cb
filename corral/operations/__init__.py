"""What operators see of a node: metrics (and, beside them, logs and traces)."""

from corral.operations.metrics import NodeMetrics
from corral.operations.server import run_metrics_listener

__all__ = [
    "NodeMetrics",
    "run_metrics_listener",
]
