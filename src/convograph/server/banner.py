"""The lines `convograph serve` prints once it listens: where the viewer is and what it stores where."""

from __future__ import annotations

import re
from pathlib import Path

from convograph import __version__
from convograph.server.config import ServerConfig
from convograph.store.url import default_url

__all__ = ["hide_password", "startup_banner"]


_PASSWORD = re.compile(r"(://[^:/@,?#]*:)[^@/?#]*@")


def hide_password(url: str) -> str:
    """``url`` with any password replaced by ``***`` (banners and logs never show secrets); also
    each URL of a comma-separated list, and ``redis+cluster://user:pw@h:1,h:2``."""
    return _PASSWORD.sub(r"\1***@", url)


def startup_banner(config: ServerConfig, base_url: str, *, key_count: int) -> str:
    """Several lines: the viewer URL, the data directory, the event log, the graph, the API keys."""
    data_dir = Path(config.data_dir).resolve()
    event_log = hide_password(config.database_url or default_url(data_dir))
    if not config.intelligence:
        graph = "off (--no-intelligence)"
    elif config.graph_url:
        graph = hide_password(config.graph_url)
    else:
        graph = f"embedded FalkorDB in {data_dir}"
    keys = (
        f"{key_count} from {config.api_key_file}"
        if key_count
        else "none (loopback only; anyone here may call)"
    )
    rows = (
        ("viewer", f"{base_url}/"),
        ("API", f"{base_url}/openapi.json"),
        ("data directory", str(data_dir)),
        ("event log", event_log),
        ("graph", graph),
        ("API keys", keys),
    )
    width = max(len(name) for name, _ in rows)
    lines = [f"convograph {__version__} is serving {base_url}  (Ctrl-C stops it)"]
    lines.extend(f"  {name.ljust(width)}  {value}" for name, value in rows)
    return "\n".join(lines)
