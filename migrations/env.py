"""Alembic environment: the URL comes from the caller (api.store.migrate) or from Settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool, text

from api.store.tables import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    if url:
        return str(url)
    from api.settings import Settings

    return Settings().database_url


def run_offline() -> None:
    context.configure(
        url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True
    )
    with context.begin_transaction():
        context.run_migrations()


# Several replicas may start at once; on PostgreSQL they take turns (a session advisory lock).
MIGRATION_LOCK_ID = 0x6D657368706C616E  # "meshplan"


def run_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_lock(:id)"), {"id": MIGRATION_LOCK_ID})
            connection.commit()
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
