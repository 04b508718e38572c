"""Test hook for a streams worker subprocess (on its PYTHONPATH only in tests/integration/test_offsets.py).

With STREAMS_TEST_SKIP_RAW="<partition>:<offset>", the ingest agent never sees that raw record the first
time Faust hands it over, and does not ack it: exactly what faust-streaming 0.15.3's stream does with an
event it skips around a rebalance (rftbus/streams/checkpoint/holes.py). The delivery guard must fetch it again.
"""

import os

_spec = os.environ.get("STREAMS_TEST_SKIP_RAW")
if _spec:
    _part, _off = (int(x) for x in _spec.split(":"))
    from rftbus.streams import ingest as _ingest

    _handle = _ingest.Ingest.handle
    _skipped = []

    async def handle(self, event):
        msg = event.message
        if msg.topic == self.raw_topic and (msg.partition, msg.offset) == (_part, _off) and not _skipped:
            _skipped.append(msg.offset)
            return
        await _handle(self, event)

    _ingest.Ingest.handle = handle
