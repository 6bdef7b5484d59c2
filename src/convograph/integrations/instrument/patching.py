"""Patching the SDK classes: one wrapper per SDK method, built by one factory per kind of method
(OpenTelemetry's ``wrap_function_wrapper`` layout, without its dependency).

The SDK's resource *classes* are patched, not client instances, so clients made before or after
``instrument()`` are covered; each wrapper asks ``start_call`` whether the call's client is
instrumented (and where to), and calls the original method untouched when it is not. `Patch.restore`
puts the very same function object back.

Kinds: ``sync`` / ``async`` (``create``, ``parse``: the response, or a stream observed in place),
and ``sync-manager`` / ``async-manager`` (Anthropic's ``messages.stream()``: its manager's request is
wrapped, so the raw stream it opens is observed when the manager is entered).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from convograph.integrations.instrument.calls import (
    NOT_RECORDED,
    CallRecord,
    SdkApi,
    observe_async_stream,
    observe_stream,
)

__all__ = ["Patch", "StartCall", "install"]

log = logging.getLogger("convograph.instrument")

StartCall = Callable[[Any, SdkApi, str, dict[str, Any]], CallRecord | None]
"""``(resource, api, sdk, kwargs)`` -> the call's record, or None when its client is not
instrumented. Never raises."""


class Patch:
    """One patched method, and the original to put back."""

    __slots__ = ("name", "original", "owner", "wrapper")

    def __init__(self, owner: type, name: str, original: Any, wrapper: Any) -> None:
        self.owner = owner
        self.name = name
        self.original = original
        self.wrapper = wrapper

    def restore(self) -> None:
        """Put the original back (unless someone else patched the method since)."""
        if self.owner.__dict__.get(self.name) is self.wrapper:
            setattr(self.owner, self.name, self.original)


def install(
    sdk: str, table: tuple[tuple[str, str, str, Any, str], ...], start: StartCall, managers: Mapping[str, str]
) -> list[Patch]:
    """Patch every ``(module, class, method, api, kind)`` of ``table`` that exists in the installed
    SDK version; returns the patches (restore them to undo)."""
    patches: list[Patch] = []
    for module_name, class_name, method, api, kind in table:
        try:
            owner = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            log.debug("%s.%s is not in this %s version: not instrumented", module_name, class_name, sdk)
            continue
        original = owner.__dict__.get(method)
        if original is None:
            continue
        if kind in managers:
            wrapper = _manager_wrapper(
                original, api, sdk, start, managers[kind], is_async=kind.startswith("async")
            )
        elif kind == "async":
            wrapper = _async_wrapper(original, api, sdk, start)
        else:
            wrapper = _sync_wrapper(original, api, sdk, start)
        setattr(owner, method, wrapper)
        patches.append(Patch(owner, method, original, wrapper))
    return patches


def _sync_wrapper(original: Any, api: SdkApi, sdk: str, start: StartCall) -> Any:
    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = start(self, api, sdk, kwargs)
        if call is None:
            return original(self, *args, **kwargs)
        call.begin()
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            call.end(exc)
            raise
        track(call, result, is_async=False)
        return result

    return wrapper


def _async_wrapper(original: Any, api: SdkApi, sdk: str, start: StartCall) -> Any:
    @functools.wraps(original)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = start(self, api, sdk, kwargs)
        if call is None:
            return await original(self, *args, **kwargs)
        call.begin()
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:
            call.end(exc)
            raise
        track(call, result, is_async=True)
        return result

    return wrapper


def _manager_wrapper(
    original: Any, api: SdkApi, sdk: str, start: StartCall, attribute: str, *, is_async: bool
) -> Any:
    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = start(self, api, sdk, kwargs)
        manager = original(self, *args, **kwargs)
        if call is not None:
            try:
                _wrap_request(manager, attribute, call, is_async=is_async)
            except Exception:
                log.debug("could not instrument %s's stream manager", api.name, exc_info=True)
        return manager

    return wrapper


def _wrap_request(manager: Any, attribute: str, call: CallRecord, *, is_async: bool) -> None:
    """Make the manager's request begin the call and observe the stream it opens."""
    request = getattr(manager, attribute, None)
    if request is None:
        log.debug("%s has no %s: its stream is not recorded", type(manager).__name__, attribute)
        return
    if is_async:

        async def opened_async() -> Any:
            call.begin()
            try:
                stream = await request
            except BaseException as exc:
                call.end(exc)
                raise
            track(call, stream, is_async=True)
            return stream

        setattr(manager, attribute, opened_async())
        return

    def opened() -> Any:
        call.begin()
        try:
            stream = request()
        except BaseException as exc:
            call.end(exc)
            raise
        track(call, stream, is_async=False)
        return stream

    setattr(manager, attribute, opened)


def track(call: CallRecord, result: Any, *, is_async: bool) -> None:
    """Follow what the SDK returned: observe a stream in place, record a whole response, or end
    the call without output for anything else (a raw HTTP response: its output is recorded from
    the next request's history). Never raises."""
    api = call.api
    try:
        if isinstance(result, api.stream_types):
            observed = observe_async_stream(result, call) if is_async else observe_stream(result, call)
            if not observed:
                call.end(NOT_RECORDED)
        elif isinstance(result, api.response_type):
            call.result(result)
        else:
            call.end(NOT_RECORDED)
    except Exception:
        log.debug("could not follow the response of %s", api.name, exc_info=True)
        call.end(NOT_RECORDED)
