"""The one seam to Redis: key names, addresses, connections, faults, the Lua library, the
brokers, the store, partitions and dead-letter storage. Only this package imports redis.
"""
