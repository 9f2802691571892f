"""Runnable examples of the lesson's idempotency techniques (each also run by a test)."""
