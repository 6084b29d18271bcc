"""One router per resource, composed in api.app."""

from api.routes import health, jobs, keys, plans, profiles

ROUTERS = (health.router, plans.router, jobs.router, profiles.router, keys.router)
