"""Calibration: fit the cost model's constants to measured runs (docs/cost-model.md §5).

- `Observation`: a request, a candidate, what was measured, where it came from.
- `calibrate(observations, names=...) -> Calibration`: least squares on log step time
  (`planner.calibrate.fit`); raises `NotDetermined` naming a constant the data cannot fix.
- `Calibration.ref()` -> the `PlanRequest.calibration` that makes plans use it.
"""

from planner.calibrate.document import (
    Calibration,
    Measured,
    Observation,
    ObservationFit,
    calibrate,
    observation_from_run,
    predict_all,
)
from planner.calibrate.fit import FitResult, NotDetermined, fit_constants

__all__ = [
    "Calibration",
    "FitResult",
    "Measured",
    "NotDetermined",
    "Observation",
    "ObservationFit",
    "calibrate",
    "fit_constants",
    "observation_from_run",
    "predict_all",
]
