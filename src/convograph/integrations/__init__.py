"""Adapters between convograph conversations and other agent / chat-UI protocols.

One module per external protocol (pydantic-ai's layout): `ui_stream` is the shared base that turns
stored convograph events into protocol-neutral turn / step / part / tool callbacks and owns their
state; `ag_ui` (AG-UI events out, AG-UI streams in) and `ai_sdk` (the Vercel AI SDK UI message
stream) subclass it and only override leaf hooks and the encoding.
"""
