"""The app's submitters, one per backend, built on first use from the settings' SubmitConfig."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from api.submit import SubmitConfig, Submitter, SubmitterUnavailable, make_submitter

BACKENDS = ("slurm", "kubernetes")


class Submitters:
    """`get(backend)` gives the backend's submitter. `given` ones (handed to `create_app`) are
    used as they are; the others are made by `api.submit.make_submitter`."""

    def __init__(self, config: SubmitConfig, given: Mapping[str, Submitter] | None = None) -> None:
        self.config = config
        self._made: dict[str, Submitter] = dict(given or {})
        self._lock = threading.Lock()

    def get(self, backend: str) -> Submitter:
        """Raises SubmitterUnavailable when the backend cannot be set up here (its client
        library missing, its configuration incomplete): to the caller, it is unreachable."""
        with self._lock:
            if backend not in self._made:
                try:
                    self._made[backend] = make_submitter(backend, self.config)
                except (ImportError, ValueError, OSError) as exc:
                    raise SubmitterUnavailable(
                        f"the {backend} backend cannot be set up on this service: {exc}",
                        retry_after_s=self.config.retry_after_s,
                    ) from exc
            return self._made[backend]
