"""One router per resource, composed in api.app."""

from api.routes import evaluations, health, jobs, keys, launch, plans, profiles, runs

ROUTERS = (
    health.router,
    plans.router,
    jobs.router,
    runs.router,
    launch.router,
    evaluations.router,
    profiles.router,
    keys.router,
)
