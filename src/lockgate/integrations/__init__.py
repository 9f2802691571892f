"""What lockgate plugs into below its API: PostgreSQL claims, enqueue on commit, the embedded
server.
"""
