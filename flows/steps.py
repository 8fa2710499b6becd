"""Steps ``prefect.yaml`` runs during ``prefect deploy`` (its ``build`` section).

``require_api_server``: without ``PREFECT_API_URL`` (a shell that missed the README's ``export``), every ``prefect``
command runs against a temporary server of its own on ``$PREFECT_HOME``'s database. Work pools and deployments are
then created without an error and ``prefect deployment ls`` lists them, but a temporary server runs no scheduler
(Prefect 3.7.7 runs only the services marked for ephemeral mode there), so the nightly deployment never gets a
scheduled run and the real server never sees it. The step stops the deploy before anything is registered;
``python -m flows.serve`` (the same deployments, served from one process) stops the same way.
"""

from __future__ import annotations

from typing import Any


def require_api_server(who: str = "`prefect deploy`") -> dict[str, Any]:
    """Stop ``prefect deploy`` (or ``who``: ``python -m flows.serve`` calls it too) with one line (``SystemExit``,
    so Prefect prints no traceback) when no API server is configured; returns ``{"api_url": ...}`` otherwise."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if not url:
        raise SystemExit(
            f"PREFECT_API_URL is not set: {who} would register the deployments on a temporary server that "
            "runs no scheduler, so the nightly runs would never appear. Start `prefect server start` and export "
            "PREFECT_API_URL=http://127.0.0.1:4200/api in this shell (README, 'Scheduled curation')."
        )
    return {"api_url": url}
