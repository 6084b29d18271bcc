"""`meshplan_queue_searches{status}`: search tasks waiting ('todo') and running ('doing'),
read from procrastinate's table at each scrape of /metrics (the signal to scale workers on,
e.g. a Kubernetes HPA through a Prometheus adapter)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, text

from api.queue.app import SEARCH_TASK

log = logging.getLogger("meshplan.queue")

STATUSES = ("todo", "doing")
DEPTH_SQL = text(
    "SELECT status::text, count(*) FROM procrastinate_jobs "
    "WHERE task_name = :task AND status IN ('todo', 'doing') GROUP BY status"
)


class QueueDepth(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        try:
            with self.engine.connect() as conn:
                counts = dict(conn.execute(DEPTH_SQL, {"task": SEARCH_TASK}).tuples().all())
        except Exception:  # the database is away: /metrics still answers, without this one
            log.warning("queue depth not read", exc_info=True)
            return
        family = GaugeMetricFamily(
            "meshplan_queue_searches", "Search tasks in the queue, by status", labels=["status"]
        )
        for status in STATUSES:
            family.add_metric([status], float(counts.get(status, 0)))
        yield family
