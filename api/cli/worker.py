"""`meshplan worker`: run search tasks from the PostgreSQL queue (settings from MESHPLAN_*)."""

from __future__ import annotations

import typer

from api.cli.output import fail


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


def worker(
    concurrency: int = typer.Option(
        0,
        "--concurrency",
        min=0,
        max=64,
        help="searches run at once (0: MESHPLAN_WORKER_CONCURRENCY, default 2)",
    ),
    name: str = typer.Option("", help="the worker's name in logs (default host:pid)"),
    as_json: bool = typer.Option(
        False, "--json", help="one JSON line when it starts and one when it stops"
    ),
) -> None:
    """Run search tasks from the PostgreSQL queue until SIGTERM (settings from MESHPLAN_*)."""
    import json
    import logging

    from api.queue.worker import EXIT_REQUEUED, default_name, run_process
    from api.settings import Settings

    settings = Settings()  # an invalid setting: api.cli.errors.guard names it (not its value)
    if not settings.queue_enabled():
        fail(
            f"meshplan worker needs PostgreSQL and MESHPLAN_SEARCH_QUEUE auto or procrastinate "
            f"(database {settings.database_url.split(':', 1)[0]!r}, "
            f"queue {settings.search_queue!r})"
        )
    concurrency = concurrency or settings.worker_concurrency
    name = name or default_name()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # procrastinate logs every task's arguments (a whole request) at INFO
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    if settings.migrate_on_start:
        from api.store import migrate

        migrate.upgrade(settings.database_url)
    start = {
        "event": "started",
        "name": name,
        "concurrency": concurrency,
        "shutdown_grace_s": settings.worker_shutdown_grace_s,
    }
    if as_json:
        typer.echo(json.dumps(start))
    else:
        grace = settings.worker_shutdown_grace_s
        typer.echo(f"meshplan worker {name}: {concurrency} at once (grace {grace} s)")

    def on_stop(requeued: list[int]) -> None:
        doc = {"event": "stopped", "name": name, "requeued": requeued}
        if as_json:
            typer.echo(json.dumps(doc))
        else:
            typer.echo(f"meshplan worker {name} stopped; re-queued tasks: {requeued or 'none'}")

    code = run_process(settings, concurrency=concurrency, name=name, on_stop=on_stop)
    if code == EXIT_REQUEUED:
        raise typer.Exit(code)
