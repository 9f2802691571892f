"""progress_write.lua and progress_read.lua, called directly against real Redis."""

from __future__ import annotations

import redis

from lockgate.backend.keys import Keys
from lockgate.backend.lua import ScriptCall, SyncScripts


def test_a_write_sets_each_key_with_its_ttl_and_a_read_answers_false_for_none(
    scripts: SyncScripts, keys: Keys, rclient: redis.Redis
) -> None:
    a, b = keys.progress("a"), keys.progress("b")
    written = scripts.run(
        ScriptCall("progress_write", [a, b], [60_000, b"[0.5,null]", b'[1.0,"x"]'])
    )
    assert written == 2
    assert 0 < rclient.pttl(a) <= 60_000 and 0 < rclient.pttl(b) <= 60_000
    read = scripts.run(ScriptCall("progress_read", [a, keys.progress("none"), b], []))
    assert read == [b"[0.5,null]", None, b'[1.0,"x"]']
    # A later write replaces the value and renews the TTL; nothing else is touched.
    scripts.run(ScriptCall("progress_write", [a], [120_000, b"[0.75,null]"]))
    assert rclient.get(a) == b"[0.75,null]" and rclient.pttl(a) > 60_000
    assert not rclient.exists(keys.job("a"))
