"""Ray's token-authentication mode, said when the user has not (Ray 2.60 warns about it on every run otherwise)."""

from __future__ import annotations

import os

__all__ = ["AUTH_MODE", "choose_auth_mode"]


AUTH_MODE = "RAY_AUTH_MODE"  # Ray's token authentication: 'token' or 'disabled' (cluster/README.md)


def choose_auth_mode(new_cluster: bool) -> None:
    """Say Ray's token-authentication mode when the user has not, so that Ray does what it would do anyway
    without its start-up warning on every run (Ray 2.60, ``ray._private.authentication``).

    A new local Ray gets token authentication, Ray's default (a token in ``~/.ray/auth_token``, made if missing):
    other users of the machine cannot run code on it. Joining a cluster, the mode follows the token this process
    can read (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``), as Ray decides; without one
    Ray joins a cluster that has authentication off, and says nothing.
    """
    if os.environ.get(AUTH_MODE):
        return
    try:
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        if not new_cluster and not AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
            return
        os.environ[AUTH_MODE] = "token"
        Config.initialize("")  # this process's cached Ray config reads the mode again (as Ray's own switch does)
    except Exception:  # noqa: BLE001 - another Ray layout: leave the choice (and its warning) to Ray
        return
