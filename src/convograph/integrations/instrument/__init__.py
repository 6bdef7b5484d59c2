"""SDK instrumentation: record every call of existing ``openai`` / ``anthropic`` clients as
convograph events, with no change to the calling code (``convograph.instrument`` re-exports it).

```python
import openai
from convograph.instrument import instrument

client = openai.OpenAI()
with instrument(client, sink="http://127.0.0.1:8321", conversation_id="support-42"):
    client.chat.completions.create(model="gpt-4o-mini", messages=[...])   # recorded
```

Modules (one per SDK, pydantic-ai's adapter layout): `openai_sdk` and `anthropic_sdk` (what is
patched, how requests read), `calls` (one call's record and the stream observers), `history` (the
request diff against what was recorded), `recorder` (the background worker and the sinks),
`patching` (the method wrappers), `instrumentation` (the public functions). docs/integrations.md
describes what is recorded.
"""

from convograph.integrations.instrument.instrumentation import (
    Instrumentation,
    conversation,
    instrument,
    uninstrument,
)

__all__ = ["Instrumentation", "conversation", "instrument", "uninstrument"]
