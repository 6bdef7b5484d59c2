"""`convograph demo`: bundled realistic conversations played into a running server at a human pace.

`convograph.demo.conversations` holds the paced scripts; `convograph.demo.player` posts them
through the HTTP API (and waits for relay decisions made in the viewer).
"""

from __future__ import annotations

from convograph.demo.conversations import DEMO_CONVERSATIONS, AwaitRelay, Script, Step
from convograph.demo.player import play_all, play_script

__all__ = ["DEMO_CONVERSATIONS", "AwaitRelay", "Script", "Step", "play_all", "play_script"]
