"""One router per resource, composed in api.app."""

from api.pages import views as pages
from api.routes import (
    bubble,
    calibrations,
    evaluations,
    health,
    jobs,
    keys,
    launch,
    plans,
    profiles,
    runs,
    submissions,
    timeline,
)

ROUTERS = (
    health.router,
    plans.router,
    jobs.router,
    runs.router,
    submissions.router,
    timeline.router,
    bubble.router,
    launch.router,
    evaluations.router,
    profiles.router,
    calibrations.router,
    keys.router,
    pages.router,
)
