"""`meshplan serve`, `meshplan db upgrade|downgrade|current`, `meshplan keys create`."""

from __future__ import annotations

import typer

from api.cli.output import emit_json, fail


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    db = typer.Typer(help="Database migrations (Alembic).", no_args_is_help=True)
    db.command("upgrade")(db_upgrade)
    db.command("downgrade")(db_downgrade)
    db.command("current")(db_current)
    app.add_typer(db, name="db")
    keys = typer.Typer(help="API keys.", no_args_is_help=True)
    keys.command("create")(keys_create)
    app.add_typer(keys, name="keys")


def serve(
    host: str = typer.Option("127.0.0.1", help="interface to listen on"),
    port: int = typer.Option(8000, help="TCP port"),
    dev_open: bool = typer.Option(
        False, "--dev-open", help="allow requests without an API key (tenant 'dev'); local only"
    ),
    workers: int = typer.Option(1, help="uvicorn worker processes"),
    with_worker: bool = typer.Option(
        False,
        "--with-worker",
        help="also run a search-queue worker in each API process (PostgreSQL)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the settings as JSON and exit"),
) -> None:
    """Run the plan service (settings from MESHPLAN_* environment variables)."""
    import math
    import os

    import uvicorn

    from api.settings import Settings

    try:
        from api.http_protocol import IMPORT_PATH as http_protocol
    except ImportError:  # no httptools: uvicorn picks h11
        http_protocol = "auto"

    if dev_open:
        os.environ["MESHPLAN_DEV_OPEN"] = "true"
    if with_worker:
        os.environ["MESHPLAN_WITH_WORKER"] = "true"
    settings = Settings()
    if with_worker and not settings.queue_enabled():
        fail(
            "--with-worker needs PostgreSQL (MESHPLAN_DATABASE_URL) and MESHPLAN_SEARCH_QUEUE "
            f"auto or procrastinate; got {settings.database_url.split(':', 1)[0]!r}, "
            f"{settings.search_queue!r}"
        )
    if as_json:
        emit_json(
            {
                "host": host,
                "port": port,
                "workers": workers,
                **settings.model_dump(exclude={"bootstrap_admin_key"}),
            }
        )
        return
    if settings.migrate_on_start:  # once here, not in every worker process
        from api.store import migrate

        migrate.upgrade(settings.database_url)
        os.environ["MESHPLAN_MIGRATE_ON_START"] = "false"
    typer.echo(f"meshplan service on http://{host}:{port} (database {settings.database_url})")
    # SIGTERM: uvicorn stops accepting, lets in-flight requests finish for up to
    # api_shutdown_grace_s, then runs the app's shutdown (the embedded worker's own grace)
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        http=http_protocol,  # httptools, a response in one write (api.http_protocol)
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        access_log=settings.access_log,
        timeout_graceful_shutdown=math.ceil(settings.api_shutdown_grace_s),
    )


def _url() -> str:
    from api.settings import Settings

    return Settings().database_url


def db_upgrade(
    revision: str = typer.Argument("head"), as_json: bool = typer.Option(False, "--json")
) -> None:
    """Apply migrations up to REVISION (default head)."""
    from api.store import migrate

    migrate.upgrade(_url(), revision)
    _report(as_json)


def db_downgrade(
    revision: str = typer.Argument("base"), as_json: bool = typer.Option(False, "--json")
) -> None:
    """Revert migrations down to REVISION (default base: an empty database)."""
    from api.store import migrate

    migrate.downgrade(_url(), revision)
    _report(as_json)


def db_current(as_json: bool = typer.Option(False, "--json")) -> None:
    """Print the revision the database is at."""
    _report(as_json)


def _report(as_json: bool) -> None:
    from api.store import migrate

    url = _url()
    revision = migrate.current(url)
    if as_json:
        emit_json({"database_url": url, "revision": revision})
    else:
        typer.echo(revision or "(empty: no migrations applied)")


def keys_create(
    tenant: str = typer.Option(..., help="the tenant the key acts for"),
    admin: bool = typer.Option(False, "--admin", help="the key may create other keys"),
    name: str = typer.Option("", help="a label"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Create an API key (printed once; stored hashed)."""
    from api.store import migrate
    from api.store.db import make_engine, make_sessionmaker, session_scope
    from api.store.keys import create_key

    url = _url()
    if not tenant.strip():
        fail("--tenant must not be empty", as_json=as_json)
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            row, key = create_key(session, tenant=tenant, admin=admin, name=name)
            doc = {"id": row.id, "tenant": row.tenant, "admin": row.admin, "key": key}
    finally:
        engine.dispose()
    if as_json:
        emit_json(doc)
    else:
        typer.echo(key)
