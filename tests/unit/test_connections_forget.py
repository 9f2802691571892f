"""forget_server: what the cluster-mode probe found at an address is asked again."""

from __future__ import annotations

from lockgate.backend import connections


def test_forgetting_an_address_drops_every_url_that_names_it_and_only_those() -> None:
    known = connections._in_cluster_mode
    saved = dict(known)
    try:
        known.update({
            "redis://127.0.0.1:34449/0": True, "redis://:pw@127.0.0.1:34449": True,
            "redis://127.0.0.1:34450/0": False, "not a url": True,
        })  # fmt: skip
        connections.forget_server("127.0.0.1", 34449)
        assert "redis://127.0.0.1:34449/0" not in known
        assert "redis://:pw@127.0.0.1:34449" not in known
        assert known["redis://127.0.0.1:34450/0"] is False and known["not a url"] is True
    finally:
        known.clear()
        known.update(saved)
