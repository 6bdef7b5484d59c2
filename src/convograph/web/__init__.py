"""The browser viewer served by ``convograph serve`` at ``/`` (assets under ``/static/``).

The viewer is plain ES modules and CSS committed as-is in ``static/``: nothing is built at install
or run time, and the page makes no request outside its own origin (no CDN, no web fonts). The
server mounts `STATIC_DIR` at ``/static`` and answers ``/`` with `index_html()`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Final

__all__ = ["STATIC_DIR", "index_html"]

STATIC_DIR: Final[Path] = Path(__file__).resolve().parent / "static"
"""Directory of the shipped assets (``index.html``, ``app.css``, ``js/*.js``)."""


@cache
def index_html() -> bytes:
    """The single-page shell (``static/index.html``); read once, then cached. O(size) first call."""
    return (STATIC_DIR / "index.html").read_bytes()
